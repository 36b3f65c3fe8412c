// A decision carried out, in the background of the passes that follow it: its writes (act.ts), then what each node's
// reports say and the policy's status. One at a time per policy: the passes meanwhile look and report, and decide
// nothing until it is back (the fences of the writes it made are then in place).
import type { Logger } from '../../observability/log.js';
import type { EventRecorder, StatusWriter } from '../../ports/writes.js';
import { actOnPlan, type ActDeps } from './act.js';
import type { Evictor } from '../remediation/evictor.js';
import {
  followUpWait,
  policyStatusOf,
  remediationOf,
  setRemediation,
  type Done,
  type PassHooks,
  type Pass,
  type Plan,
  type Requeue,
  type Seen,
} from '../sandboxpolicy/pass.js';
import { sameStatus } from '../../status/health-patch.js';
import type { Reporter } from '../reporting/reporter.js';
import type { ReportLedger } from '../reporting/unreported.js';
import type { StatusOverlay } from '../reporting/mutation-cache.js';

export interface CarryOutDeps extends ActDeps {
  writer: StatusWriter;
  overlay: StatusOverlay;
  evictor: Evictor;
  reporter: Reporter;
  /** What was done on each node until a report holds it. */
  ledger: ReportLedger;
  recorder: EventRecorder;
  logger: Logger;
  hooks: PassHooks;
  /** Look at the policy again after this long (0: at once), or after the queue's backoff. */
  requeue(policy: string, after: Requeue): void;
}

/**
 * Carries out the plan, then hands each node's remediation (and what was done on it) to its reports, submitting the
 * nodes whose reports change, and writes the policy's status. Failures wait in the policy's memory for its next pass,
 * which fails with them, so the queue backs off; the policy is looked at again as the follow-up needs, or at once
 * when a pass was held back meanwhile.
 */
export async function carryOut(deps: CarryOutDeps, pass: Pass, seen: Seen, plan: Plan): Promise<void> {
  const { policy, memory, failures } = pass;
  let wait: number | undefined;
  try {
    const done = await actOnPlan(deps, pass, plan);
    const remediation = remediationOf(pass, seen, plan, done);
    for (const [node, { parts, results }] of remediation.nodes) {
      const changed = setRemediation(memory, node, parts, (guard) => deps.hooks.onBlocked?.(guard));
      if (results.length > 0) {
        deps.ledger.add(node, results);
        delete memory.state(node).facts; // they count what was done on the node, told or not
      }
      if (changed || results.length > 0) deps.reporter.submit(policy.name, memory, node);
    }
    // What we changed on the node (or its pods) comes back through the watch: look again, behind the fence.
    for (const node of remediation.touched) memory.markDirty(node);
    await writePolicyStatus(deps, pass, seen, plan, done, remediation);
    wait = followUpWait(pass, plan, done);
  } catch (err) {
    failures.add(`carrying out a decision of sandboxpolicy/${policy.name}`, err);
  } finally {
    const first = memory.fail(failures.retriable);
    memory.carrying = undefined;
    const held = memory.held;
    memory.held = false;
    // A failure is retried after the queue's backoff (the next pass fails with it, and the backoff grows): at once, a
    // failing apiserver would be asked again at the pace of its refusals. A failure already noted has asked.
    if (failures.retriable.length > 0) {
      if (first) deps.requeue(policy.name, 'backoff');
    } else if (held) deps.requeue(policy.name, 0);
    else if (wait !== undefined) deps.requeue(policy.name, wait);
  }
}

async function writePolicyStatus(
  deps: CarryOutDeps,
  pass: Pass,
  seen: Seen,
  plan: Plan,
  done: Done,
  counts: { degraded: number; remediating: number },
): Promise<void> {
  const { policy, memory, now, failures } = pass;
  const previous = policy.status;
  const recentEvictions = deps.evictor.log(previous, done.evictedAt, now);
  const blockedNew = memory.blockedNew;
  const status = policyStatusOf(pass, plan, done, { ...counts, blockedNew, recentEvictions });
  deps.hooks.onPolicyStatus?.(policy.name, status);
  // Counts over only the settled nodes would be wrong: the policy status waits for the rest. Compared with what the
  // API holds now, which includes the reservation written before evicting.
  const stored = { ...(previous ?? {}), ...(done.reserved ?? {}) };
  if (seen.unsettled > 0 || sameStatus(stored, status)) return;
  try {
    const version = await deps.writer.patchPolicyStatus(policy.name, status);
    memory.blockedNew -= blockedNew;
    deps.overlay.wrotePolicyStatus(memory, version, stored, status);
    const storm = plan.remediation?.storm;
    if (storm?.detected && previous?.conditions?.find((c) => c.type === 'StormDetected')?.status !== 'True') {
      deps.logger.warn('Detected a storm: starting nothing new', { policy: policy.name, ...storm });
      await deps.recorder.record({
        target: { kind: 'SandboxPolicy', name: policy.name, uid: policy.uid },
        type: 'Warning',
        reason: 'StormDetected',
        message: status.conditions?.find((c) => c.type === 'StormDetected')?.message ?? '',
      });
    }
  } catch (err) {
    failures.add(`status of sandboxpolicy/${policy.name}`, err);
  }
}
