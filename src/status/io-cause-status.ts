// PURE: the ioCause and topConsumer of a node's SandboxHealth, and the Event of a new cause.
import type {
  IoAttribution,
  IoCauseStatus,
  IoConsumer,
  RuntimeInfoStatus,
  SandboxHealthStatus,
} from '../api/v1alpha1/index.js';
import type { NodeView } from '../detection/index.js';
import { topConsumer, type IoCauseDecision } from '../policy/io-cause.js';
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

const who = (c: IoConsumer) => `${c.kind} ${c.podUid ?? `${c.namespace ?? ''}/${c.name ?? ''}`} ${c.role}`;
/** The cast: who is there, in what role. While it holds, the figures' wobble is not news (nor a write). */
const cast = (consumers: readonly IoConsumer[] | undefined) => (consumers ?? []).map(who).join('\n');

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
  if (stored?.cause === decision.cause && cast(stored.consumers) === cast(consumers))
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
