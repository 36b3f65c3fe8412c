#!/usr/bin/env node
// Composition root: parses the command line and hands over to one subcommand.
import { Command } from 'commander';
import { stringify } from 'yaml';
import { buildCustomResourceDefinition, RESOURCE_KINDS } from './api/v1alpha1/index.js';
import { runValidate } from './cli/validate.js';

const program = new Command()
  .name('sandbox-remediator')
  .description(
    "Finds pods stuck in ContainerCreating because their node's disk IO is saturated, proves the IO pressure from node evidence, and remediates (cordon, evict, slow rollouts), undoing it all on recovery.",
  )
  .version(process.env.npm_package_version ?? '0.1.0')
  .showHelpAfterError();

program
  .command('validate')
  .description(
    'Validate SandboxPolicy manifests offline, exactly as the operator will, listing every problem',
  )
  .argument('<files...>', 'YAML files (- for standard input)')
  .addHelpText(
    'after',
    '\nExit status: 0 when every policy is valid, 1 otherwise.\nExample: sandbox-remediator validate config/samples/*.yaml',
  )
  .action(async (files: string[]) => {
    process.exitCode = await runValidate(files);
  });

program
  .command('crds')
  .description('Print the CustomResourceDefinitions (the same as crds/), e.g. for kubectl apply -f -')
  .action(() => {
    for (const kind of RESOURCE_KINDS)
      process.stdout.write(`---\n${stringify(buildCustomResourceDefinition(kind), { lineWidth: 0 })}`);
  });

await program.parseAsync(process.argv);
