#!/usr/bin/env node
// Composition root: parses the command line and hands over to one subcommand.

// `sandbox-remediator crds | head` closes the pipe early: that is not an error.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

// The agent, on every node, parses its own flags: commander alone is about 4 MiB of its RSS (docs/adr/0011).
if (process.argv[2] === 'agent') {
  const { runAgentCli } = await import('./cli/agent.js');
  process.exitCode = await runAgentCli(process.argv.slice(3));
} else {
  const { parseWithCommander } = await import('./cli/program.js');
  await parseWithCommander(process.argv);
}
