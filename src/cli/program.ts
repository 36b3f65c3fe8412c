// The command line of every subcommand but the agent's (cli/agent-options.ts), one function per subcommand, in the
// order `--help` lists them. main.ts imports this module only for those subcommands: commander stays out of the agent.
import { Command, InvalidArgumentError, Option } from 'commander';
import { basename } from 'node:path';
import type { ClassifyFlags } from './classify.js';
import type { CleanupFlags } from './cleanup.js';
import type { DiagnoseFlags } from './diagnose.js';
import type { OperatorFlags } from './operator.js';
import { DEFAULT_LIFT_TIMEOUT_SECONDS } from '../cleanup/run.js';
import { AGENT_DESCRIPTION, formatAgentHelp, parsePositiveInt } from './agent-options.js';
import { LOG_LEVELS } from '../observability/log.js';
import { VERSION } from './version.js';

export async function parseWithCommander(argv: string[]): Promise<void> {
  const program = new Command()
    .name(programName(argv[1]))
    .description(
      "Finds pods stuck in ContainerCreating because their node's disk IO is saturated, proves the IO pressure from node evidence, and remediates (cordon, evict, slow rollouts), undoing it all on recovery.",
    )
    .version(VERSION)
    .showHelpAfterError();
  addValidate(program);
  addOperator(program);
  addAgent(program);
  addDiagnose(program);
  addClassify(program);
  addCleanup(program);
  addRelease(program);
  addCrds(program);
  await program.parseAsync(argv);
}

/** As invoked: `kubectl sandbox` when kubectl runs the package's kubectl-sandbox (a plugin), else its own name. */
export function programName(argv1: string | undefined): string {
  return basename(argv1 ?? '') === 'kubectl-sandbox' ? 'kubectl sandbox' : 'sandbox-remediator';
}

function positiveInt(value: string): number {
  const n = parsePositiveInt(value);
  if (n instanceof Error) throw new InvalidArgumentError(n.message);
  return n;
}

/** A generated certificate's lifetime: long enough to renew (a third of it) after the trust grace (a sixth). */
function certLifetime(value: string): number {
  const n = positiveInt(value);
  if (n < 30 || n > 315_360_000)
    throw new InvalidArgumentError('must be between 30 and 315360000 (10 years)');
  return n;
}

function kubeconfigOption(): Option {
  return new Option(
    '--kubeconfig <path>',
    'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)',
  );
}

function outputOption(description: string): Option {
  return new Option('-o, --output <format>', description).choices(['text', 'json']).default('text');
}

function addValidate(program: Command): void {
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
      // Subcommands load their own dependencies: the agent on every node should not carry the operator's.
      const { runValidate } = await import('./validate.js');
      process.exitCode = await runValidate(files);
    });
}

function addOperator(program: Command): void {
  program
    .command('operator')
    .description(
      'Run the operator: watch pods, events and nodes; report SandboxHealth per node and SandboxPolicy status',
    )
    .addOption(kubeconfigOption())
    .option(
      '--leader-elect',
      'run as one of several replicas: only the holder of a Lease in --operator-namespace acts (15 s lease, 10 s renew deadline, 2 s retry); the others keep warm caches and take over; losing the Lease exits',
      false,
    )
    .option(
      '--leader-election-id <name>',
      'the Lease that --leader-elect holds, in --operator-namespace',
      'sandbox-remediator-operator',
    )
    .option('--metrics-bind-address <addr>', 'where /metrics is served; "0" disables', ':8080')
    .option(
      '--health-probe-bind-address <addr>',
      'where /healthz and /readyz are served; "0" disables',
      ':8081',
    )
    .option(
      '--dry-run',
      'every policy decides and reports (logs, Events, metrics, status) but changes no Node or Pod (per policy: spec.safety.dryRun)',
      false,
    )
    .addOption(new Option('--log-level <level>', 'log verbosity').choices(LOG_LEVELS).default('info'))
    .option('--workers <n>', 'policies reconciled concurrently', positiveInt, 2)
    .option(
      '--ready-max-disconnected-seconds <n>',
      '/readyz fails while any watch of the apiserver has been broken this long',
      positiveInt,
      60,
    )
    .option(
      '--watch-silence-seconds <n>',
      'restart a watch that delivered nothing, not even a bookmark (sent about once a minute), for this long',
      positiveInt,
      150,
    )
    .option(
      '--install-crds',
      "create or update the CustomResourceDefinitions (server-side apply) and wait until they are Established; needs write access to CRDs, which config/rbac's operator role does not grant: for an admin's kubeconfig",
      false,
    )
    .option(
      '--webhook-bind-address <addr>',
      'where the pod-start pacing webhook listens (HTTPS), e.g. :9443; "0" turns it off (then pacePodStarts gates nothing)',
      '0',
    )
    .option(
      '--webhook-url <url>',
      'the URL the apiserver calls, registered in the MutatingWebhookConfiguration (default: https://<bind address>/mutate-pods); in a cluster, use a Service in front of the operator',
    )
    .option(
      '--webhook-cert-dir <dir>',
      'tls.crt, tls.key and ca.crt for the webhook, as cert-manager mounts them (config/samples/cert-manager/), read again whenever they change; without it a CA and certificate are generated, and renewed before they expire',
    )
    .option(
      '--webhook-cert-lifetime-seconds <n>',
      'how long a generated webhook certificate lasts (30 s to 10 years); a new one is registered and served when a third of it is left, without a restart',
      certLifetime,
      31_536_000,
    )
    .option(
      '--operator-namespace <ns>',
      "the operator's own namespace, whose Deployments are never throttled (default: $POD_NAMESPACE)",
      process.env.POD_NAMESPACE ?? 'sandbox-remediator-system',
    )
    .addHelpText(
      'after',
      '\nLogs are JSON lines on stderr. SIGTERM or SIGINT stops it gracefully.\nExample: sandbox-remediator operator --kubeconfig .cluster/kubeconfig --metrics-bind-address 127.0.0.1:8080',
    )
    .action(async (flags: OperatorFlags) => {
      const { runOperator } = await import('./operator.js');
      // Exit now that it has stopped: a request abandoned to a silent apiserver must not keep the process alive.
      process.exit(await runOperator(flags));
    });
}

// Listed here and answering `help agent`; never run from here (main.ts hands `agent ...` to cli/agent.ts before it
// loads commander). `[options]` only shows in the list.
function addAgent(program: Command): void {
  program
    .command('agent')
    .description(AGENT_DESCRIPTION)
    .argument('[options]')
    .configureHelp({ formatHelp: () => formatAgentHelp(process.stdout.columns) });
}

function addDiagnose(program: Command): void {
  program
    .command('diagnose')
    .description(
      'Run the on-call checklist for a node from the cluster (read-only): stuck pods and reserved sandbox names, the IO evidence and its age, D-state processes, the runtime version, what the operator did, what it does next and what blocks it; without NODE, the nodes that need attention',
    )
    .argument('[node]', 'the node to diagnose (also the name of its SandboxHealth)')
    .addOption(kubeconfigOption())
    .option('--context <name>', 'the kubeconfig context to use (default: its current-context)')
    .addOption(outputOption('text, or json (shape: schemas/diagnosis.schema.json)'))
    .addHelpText(
      'after',
      [
        '',
        'Exit status: 0 when it ran (an unhealthy node too), 1 when there is no such node and no SandboxHealth,',
        '2 for a usage mistake or a cluster it cannot read.',
        'Examples:',
        '  sandbox-remediator diagnose                     the nodes that need attention, worst first',
        '  sandbox-remediator diagnose worker-7            the checklist for worker-7',
        "  kubectl sandbox diagnose worker-7 -o json | jq '.stuckPods.listed[] | .reservedFor'",
      ].join('\n'),
    )
    // Usage mistakes exit 2 with one line, as configuration mistakes do elsewhere; 1 says "no such node".
    .showHelpAfterError(false)
    .exitOverride((err) => {
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (node: string | undefined, flags: DiagnoseFlags) => {
      const { runDiagnose } = await import('./diagnose.js');
      process.exitCode = await runDiagnose(node, flags);
    });
}

function addClassify(program: Command): void {
  program
    .command('classify')
    .description(
      'Classify sandbox creation failure messages as the operator does: the cause, whether it points at IO (only IO causes can lead to a cordon), the runtime when the wording tells it, the reserved name and its holder',
    )
    .argument(
      '[files...]',
      'files of messages, one per line, or a kubectl get events -o json List (- or none: standard input)',
    )
    .addOption(outputOption('text, or json (an array of {source, cause, io, runtime, ...})'))
    .addHelpText(
      'after',
      [
        '',
        'Exit status: 0 (whatever the causes), 2 when a file cannot be read.',
        'Examples:',
        '  kubectl get events -A --field-selector reason=FailedCreatePodSandBox -o json | sandbox-remediator classify',
        "  journalctl -u kubelet | grep 'RunPodSandbox' | sandbox-remediator classify -o json | jq '.[] | select(.io)'",
      ].join('\n'),
    )
    .action(async (files: string[], flags: ClassifyFlags) => {
      const { runClassify } = await import('./classify.js');
      process.exitCode = await runClassify(files, flags);
    });
}

function addCleanup(program: Command): void {
  program
    .command('cleanup')
    .description(
      'Undo everything the operator left behind, for an uninstall: the cordons and taints its stamps record, its Node condition (SandboxCreationDegraded), the rollouts it holds, its pod-start pacing gates, its medik8s node leases, the IO limits on pods and the SandboxHealths; what anyone else did stays, and is named. Run it once the operator is stopped',
    )
    .addOption(kubeconfigOption())
    .option('--context <name>', 'the kubeconfig context to use (default: its current-context)')
    .option('--dry-run', 'list what it would change and what it would leave alone; change nothing', false)
    .option('--keep-health', 'leave the SandboxHealths (the last report of each node) in place', false)
    .option(
      '--lift-timeout <seconds>',
      'how long a SandboxHealth whose node has IO limits of ours in force waits for its agent to report them lifted (its report holds what the files held); past it the SandboxHealth stays, and the run fails',
      positiveInt,
      DEFAULT_LIFT_TIMEOUT_SECONDS,
    )
    .option(
      '--force',
      "run although the operator's leader Lease is fresh (an operator that leads would redo what this undoes), or cannot be read",
      false,
    )
    .option(
      '--operator-namespace <ns>',
      "the operator's namespace, where its leader Lease is",
      process.env.POD_NAMESPACE ?? 'sandbox-remediator-system',
    )
    .option(
      '--leader-election-id <name>',
      "the operator's leader Lease (its --leader-election-id)",
      'sandbox-remediator-operator',
    )
    .addHelpText(
      'after',
      [
        '',
        'It refuses while the leader Lease is renewed within its duration: stop the operator first (scale its Deployment',
        'to 0, and leave the agents running: they lift the IO limits); one that stops gracefully releases the Lease. A node is released exactly as the',
        'operator releases it when its policy is deleted: only what our sandbox.remediator.io/ stamps record is undone,',
        "and a cordon, taint, condition, lease or gate of anyone else's stays. Every change is made on the version it was",
        'planned on; one that changed meanwhile is read and planned again. It prints a line for each change, then one',
        'for each thing it left alone and why. SandboxPolicies are yours: they go with the CRDs.',
        '',
        "IO limits (limitIo) are lifted by each node's agent, which puts back what the files held: cleanup removes the",
        "wish (spec.ioLimits) first and deletes a node's SandboxHealth only once its agent reports them lifted. So with",
        'agent.allowIoLimits on, run cleanup while the agents still run: scale the operator to 0, cleanup, then uninstall.',
        '',
        'Exit status: 0 when all of it is undone (or, with --dry-run, would be), 1 when a change or a list failed (run it',
        'again: it picks up where it stopped), 2 when it did not run (an operator leads, a usage mistake, no cluster).',
        'Examples:',
        '  sandbox-remediator cleanup --dry-run            what an uninstall would undo, and what it would leave',
        '  sandbox-remediator cleanup --keep-health        undo it all, keeping the last SandboxHealth of each node',
      ].join('\n'),
    )
    .showHelpAfterError(false)
    .exitOverride((err) => {
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (flags: CleanupFlags) => {
      const { runCleanupCommand } = await import('./cleanup.js');
      process.exitCode = await runCleanupCommand(flags);
    });
}

function addRelease(program: Command): void {
  program
    .command('release')
    .description(
      'Take over a node or a rollout the operator holds: drop its claim (our sandbox.remediator.io/ stamps) and leave the object exactly as it is (cordoned, tainted, paused, held at its partition), so that the operator never undoes it; you end it when you are done. For maintenance on a node the operator cordoned, or a rollout you want held longer',
    )
    .argument(
      '<target>',
      'a node (NAME or node/NAME), or a rollout: deployment|statefulset|daemonset|rollout/NAMESPACE/NAME',
    )
    .addOption(kubeconfigOption())
    .option('--context <name>', 'the kubeconfig context to use (default: its current-context)')
    .addHelpText(
      'after',
      [
        '',
        'It needs your own rights to patch the object. An Event on it (RemediationReleased) says who holds it now. A node',
        'labelled sandbox.remediator.io/exclude=true is released the same way by the operator itself.',
        '',
        'Exit status: 0 when released, or when the operator holds nothing there; 1 when it failed; 2 for a usage mistake.',
        'Examples:',
        '  kubectl sandbox release worker-7                 keep worker-7 cordoned for your maintenance',
        '  kubectl sandbox release deployment/shop/web      keep shop/web paused; resume it yourself',
      ].join('\n'),
    )
    .showHelpAfterError(false)
    .exitOverride((err) => {
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (target: string, flags: { kubeconfig?: string; context?: string }) => {
      const { runRelease } = await import('./release.js');
      process.exitCode = await runRelease(target, flags);
    });
}

function addCrds(program: Command): void {
  program
    .command('crds')
    .description('Print the CustomResourceDefinitions (the same as crds/), e.g. for kubectl apply -f -')
    .action(async () => {
      const { stringify } = await import('yaml');
      const { buildCustomResourceDefinition, RESOURCE_KINDS } = await import('../api/v1alpha1/index.js');
      for (const kind of RESOURCE_KINDS)
        process.stdout.write(`---\n${stringify(buildCustomResourceDefinition(kind), { lineWidth: 0 })}`);
    });
}
