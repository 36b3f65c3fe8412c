// PURE: the ioCause and topConsumer of a node's SandboxHealth, and the Event of a new cause.
import {
  consumerId,
  type IoAttribution,
  type IoCauseStatus,
  type IoConsumer,
  type RuntimeInfoStatus,
  type SandboxHealthStatus,
} from '../api/v1alpha1/index.js';
import type { NodeView } from '../detection/index.js';
import { topConsumer, type IoCauseDecision } from '../policy/io-cause.js';
import { BANDS, levelOf, nextLevel } from '../signals/material-change.js';
import type { Transition } from '../ports/writes.js';

/** What status keeps of a consumer: who, its role and share; the rates are in the reading. */
function listed(consumer: IoConsumer): IoConsumer {
  const kept: IoConsumer = { kind: consumer.kind, role: consumer.role };
  for (const key of ['podUid', 'namespace', 'name'] as const) if (consumer[key]) kept[key] = consumer[key];
  if (consumer.sharePercent !== undefined) kept.sharePercent = Math.round(consumer.sharePercent);
  if (consumer.psiSomeAvg10Percent !== undefined)
    kept.psiSomeAvg10Percent = Math.round(consumer.psiSomeAvg10Percent);
  return kept;
}

const who = (c: IoConsumer) => `${c.kind} ${consumerId(c)} ${c.role}`;
/**
 * The cast: who is there in a role that matters (not the Bystanders, who come and go at the list's edge), and the
 * band of each one's share (25, 50, 75 %, with the agent's exits). While it holds, the figures' wobble is not news
 * (nor a write); a share that crosses a band is, so the status never tells 60 % of a pod now at 30 %.
 */
function cast(consumers: readonly IoConsumer[] | undefined, before?: readonly IoConsumer[]): string {
  const was = new Map((before ?? []).map((c) => [who(c), levelOf(c.sharePercent ?? 0, BANDS.share)]));
  return (consumers ?? [])
    .filter((c) => c.role !== 'Bystander')
    .map((c) => {
      const from = was.get(who(c));
      const share = c.sharePercent ?? 0;
      return `${who(c)} ${from === undefined ? levelOf(share, BANDS.share) : nextLevel(share, from, BANDS.share)}`;
    })
    .join('\n');
}

/**
 * The cause as status says it. The stored one is kept while the cause and its cast (who, in what role) stay the
 * same: shares move a little with every reading the agent republishes, and each change would be a write.
 */
export function desiredIoCause(
  cause: { decision: IoCauseDecision; attribution?: IoAttribution | undefined },
  previous: SandboxHealthStatus | undefined,
  runtime: RuntimeInfoStatus | undefined,
  now: Date,
): Pick<SandboxHealthStatus, 'ioCause' | 'topConsumer'> {
  const { decision, attribution } = cause;
  const consumers = attribution?.consumers.map(listed);
  const stored = previous?.ioCause;
  if (stored?.cause === decision.cause && cast(stored.consumers) === cast(consumers, stored.consumers))
    return { ioCause: stored, ...(previous?.topConsumer ? { topConsumer: previous.topConsumer } : {}) };
  // The runtime's own IO on a containerd that predates the mount fix: the upgrade is the remedy that lasts.
  const advice =
    decision.cause === 'Runtime' && runtime?.predatesMountFix && runtime.note ? ` ${runtime.note}` : '';
  const ioCause: IoCauseStatus = {
    cause: decision.cause,
    message: `${decision.message}${advice}`.slice(0, 1024),
    since: stored?.cause === decision.cause ? stored.since : now.toISOString(),
  };
  if (consumers && consumers.length > 0) ioCause.consumers = consumers.slice(0, 8);
  const top = topConsumer(attribution);
  return { ioCause, ...(top ? { topConsumer: top } : {}) };
}

/** An Event on the node when a culprit or the runtime is found to do its IO (not for Unknown nor Unattributed). */
export function ioCauseTransitions(
  node: NodeView,
  previous: SandboxHealthStatus | undefined,
  desired: Pick<SandboxHealthStatus, 'ioCause'>,
): Transition[] {
  const cause = desired.ioCause;
  if (!cause || (cause.cause !== 'Pod' && cause.cause !== 'Runtime')) return [];
  const before = previous?.ioCause;
  const culprits = (c: IoCauseStatus | undefined) =>
    (c?.consumers ?? [])
      .filter((x) => x.role === 'Culprit')
      .map(who)
      .join('\n');
  if (before?.cause === cause.cause && culprits(before) === culprits(cause)) return [];
  return [
    {
      target: { kind: 'Node', name: node.name, uid: node.uid },
      type: 'Warning',
      reason: cause.cause === 'Pod' ? 'IoCulpritFound' : 'IoRuntimeBusy',
      message: cause.message,
    },
  ];
}
