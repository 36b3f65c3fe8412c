// `sandbox-remediator cleanup`: the uninstall path. Refuses while an operator leads; lists what the operator may have
// left behind, plans its undo (pure, src/cleanup/plan.ts), carries it out or, with --dry-run, only says it.
import { leaderRefusal, leaderState } from '../cleanup/leader.js';
import { planCleanup } from '../cleanup/plan.js';
import type { HealthLeftover } from '../cleanup/plan.js';
import { planUnstamp, runUnstamp, type StampedPodView } from '../cleanup/pod-stamps.js';
import {
  DEFAULT_LIFT_TIMEOUT_SECONDS,
  DryRunCleanupWriter,
  runCleanup,
  type CleanupOutcome,
} from '../cleanup/run.js';
import type { Actuator } from '../actuation/actuator.js';
import { KubeconfigError, loadKubeConfig, type KubeConfig } from '../kube/client.js';
import { KubeCleanupReads, KubeCleanupWriter, type ListProblem } from '../kube/cleanup.js';
import { describeError, isConflict } from '../kube/errors.js';
import type { StoredLease } from '../kube/leader-election.js';

export interface CleanupFlags {
  kubeconfig?: string;
  context?: string;
  dryRun: boolean;
  force: boolean;
  keepHealth: boolean;
  /** How long a SandboxHealth waits for its agent to report our IO limits lifted, in seconds. */
  liftTimeout?: number;
  operatorNamespace: string;
  leaderElectionId: string;
}

/** Each request gives up after this long: a one-shot command, not a controller. */
const REQUEST_TIMEOUT_MS = 15_000;

type Out = { write(text: string): unknown };

/** Exit status: 0 when everything of ours is undone (or would be), 1 when something failed, 2 when it did not run. */
export async function runCleanupCommand(
  flags: CleanupFlags,
  out: Out = process.stdout,
  err: Out = process.stderr,
  now: () => Date = () => new Date(),
): Promise<number> {
  let kc: KubeConfig;
  try {
    kc = loadKubeConfig(flags.kubeconfig, {
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      ...(flags.context !== undefined ? { context: flags.context } : {}),
    });
  } catch (e) {
    if (!(e instanceof KubeconfigError)) throw e;
    err.write(`cleanup: ${e.message}; pass --kubeconfig=<path>\n`);
    return 2;
  }
  const reads = new KubeCleanupReads(kc);
  if (!(await mayRun(reads, flags, out, err, now))) return 2;

  const { problems, stampedPods: pods, ...found } = await reads.leftovers();
  const nodesListed = !problems.some((p) => p.what === 'list nodes');
  const plan = planCleanup({ ...found, nodesListed, keepHealth: flags.keepHealth });
  if (flags.dryRun) out.write('Dry run: nothing is changed; each line says what cleanup would do.\n');
  if (plan.steps.length === 0 && pods.length === 0 && problems.length === 0)
    out.write("Found nothing of the operator's to undo.\n");
  const writer = flags.dryRun ? new DryRunCleanupWriter() : new KubeCleanupWriter(kc);
  const undone = await runCleanup(plan, {
    writer,
    reread: reads,
    out,
    isConflict,
    describeError,
    liftTimeoutMs: (flags.liftTimeout ?? DEFAULT_LIFT_TIMEOUT_SECONDS) * 1000,
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  });
  const outcome = add(undone, await unstampPods(pods, reads, writer, flags.dryRun, out, problems));
  for (const { what, error } of problems)
    out.write(`Failed to ${what}: ${describeError(error)} (what it holds is not cleaned up)\n`);
  const failed = outcome.failed + problems.length;
  out.write(
    `${flags.dryRun ? 'Would change' : 'Changed'} ${outcome.done}, failed ${failed}, left alone ${outcome.leftAlone}.` +
      (failed > 0 ? ' Run cleanup again once the failures are fixed: it picks up where it stopped.\n' : '\n'),
  );
  return failed > 0 ? 1 : 0;
}

/**
 * Last, the IO-limit stamps off the pods, on a fresh read of the SandboxHealths: a pod whose limit is still in force
 * keeps them. A dry run reads them as the rest would leave them (lifted).
 */
async function unstampPods(
  pods: readonly StampedPodView[],
  reads: KubeCleanupReads,
  writer: Pick<Actuator, 'dryRun' | 'stampPod'>,
  dryRun: boolean,
  out: Out,
  problems: ListProblem[],
): Promise<CleanupOutcome> {
  if (pods.length === 0) return { done: 0, failed: 0, leftAlone: 0 };
  let healths: HealthLeftover[] = [];
  try {
    if (!dryRun) healths = await reads.healths();
  } catch (error) {
    problems.push({ what: 'list sandboxhealths (the pods keep their IO-limit stamps)', error });
    return { done: 0, failed: 0, leftAlone: 0 };
  }
  return runUnstamp(planUnstamp(pods, healths), { writer, out, describeError });
}

const add = (a: CleanupOutcome, b: CleanupOutcome): CleanupOutcome => ({
  done: a.done + b.done,
  failed: a.failed + b.failed,
  leftAlone: a.leftAlone + b.leftAlone,
});

/** A fresh Lease of the operator's name in another namespace: an operator installed there, still leading. */
async function leaderElsewhere(reads: KubeCleanupReads, flags: CleanupFlags, at: Date) {
  const found = await reads.leadersNamed(flags.leaderElectionId).catch(() => []);
  for (const { namespace, stored } of found) {
    const state = leaderState(stored.record, at);
    if (state.held) return { namespace, lease: `${namespace}/${flags.leaderElectionId}`, state };
  }
  return undefined;
}

/** Whether the leader Lease lets it run: no operator leads, or --force. Says which, and why. */
async function mayRun(reads: KubeCleanupReads, flags: CleanupFlags, out: Out, err: Out, now: () => Date) {
  const lease = `${flags.operatorNamespace}/${flags.leaderElectionId}`;
  let stored: StoredLease | undefined;
  try {
    stored = await reads.leader(flags.operatorNamespace, flags.leaderElectionId);
  } catch (e) {
    if (!flags.force) {
      err.write(
        `cleanup: could not read the operator's leader Lease ${lease}: ${describeError(e)}; --force runs it anyway\n`,
      );
      return false;
    }
    out.write(`Could not read the leader Lease ${lease} (${describeError(e)}); going on: --force.\n`);
    return true;
  }
  const elsewhere = stored ? undefined : await leaderElsewhere(reads, flags, now());
  if (elsewhere) {
    if (!flags.force) {
      err.write(
        `cleanup: no Lease ${lease}, but ${leaderRefusal(elsewhere.lease, elsewhere.state)} Pass --operator-namespace ${elsewhere.namespace} if that is the one.\n`,
      );
      return false;
    }
    out.write(
      `The leader Lease ${elsewhere.lease} is held by ${elsewhere.state.holder}; going on anyway: --force.\n`,
    );
    return true;
  }
  const state = leaderState(stored?.record, now());
  if (state.held) {
    if (!flags.force) {
      err.write(`cleanup: ${leaderRefusal(lease, state)}\n`);
      return false;
    }
    out.write(`The leader Lease ${lease} is held by ${state.holder}; going on anyway: --force.\n`);
    return true;
  }
  const note =
    state.why === 'no Lease'
      ? ' (an operator run without --leader-elect takes none: make sure none runs, or pass the right --operator-namespace and --leader-election-id)'
      : '';
  out.write(
    `No operator leads: the leader Lease ${lease} is ${state.why === 'no Lease' ? 'not there' : state.why}${note}.\n`,
  );
  return true;
}
