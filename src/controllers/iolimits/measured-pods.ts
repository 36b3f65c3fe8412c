// What a node's reading says of the pods a limit is about (limitIo): each measured pod's four rates and share, and
// whether the node is in the IO incident a limit answers.
import { NO_LIMIT_LABEL } from '../../api/v1alpha1/index.js';
import type { PodView } from '../../detection/index.js';
import type { MeasuredPodIo, PodLimit } from '../../policy/io-limit.js';
import type { NodeFacts } from '../../policy/node-facts.js';
import type { NodeObservation } from '../policy-memory.js';

/**
 * The pods whose stamps the apiserver refused lately (IoLimitStamps): no limit is set or stepped on them, and they
 * may move. The limiter and observe ask it.
 */
export interface StampRefusals {
  refused(uid: string, now: Date): boolean;
}

/**
 * The measured pods as a new limit may be set on them: one the cause names a culprit (the disk saturated, not the
 * runtime's IO, not a victim) for sustainSeconds, as migration takes one (one sample is a burst), and whose stamps
 * were not refused lately; any other counts as measured at 0 % (a limit in force is decided on its rates, not its
 * share).
 */
export function ripeCulprits(
  pods: MeasuredPodIo[],
  cause: NodeObservation['cause'],
  at: {
    /** Since when (clock ms) each pod has been named a culprit. */
    since: ReadonlyMap<string, number> | undefined;
    sustainSeconds: number;
    now: Date;
    stampRefused: (uid: string) => boolean;
  },
): MeasuredPodIo[] {
  const named = new Set(cause?.cause === 'Pod' ? cause.culprits.map((c) => c.podUid ?? '') : []);
  const ripe = (uid: string) =>
    named.has(uid) &&
    at.now.getTime() - (at.since?.get(uid) ?? Infinity) >= at.sustainSeconds * 1000 &&
    !at.stampRefused(uid);
  return pods.map((p) => (ripe(p.uid) ? p : { ...p, sharePercent: 0 }));
}

/** Whether a node is in an IO incident that a limit answers: IoPressureHigh, with sandboxes stuck or fenced for it. */
export const inIoIncident = (f: NodeFacts | undefined) =>
  f !== undefined && (f.degradedByIo || f.ioStuckPods.length > 0 || f.stamps !== undefined);

/**
 * The pods of a node's attribution a limit can be set on: named, with all four rates measured (a figure missing is
 * unknown, not zero, and a limit is set on all four keys).
 */
export function measuredPods(
  observation: NodeObservation,
  running: ReadonlyMap<string, PodView> | undefined,
  limits: readonly PodLimit[],
  operatorNamespace: string | undefined,
  quietDisk: boolean,
): MeasuredPodIo[] {
  const pods: MeasuredPodIo[] = [];
  // Named where the pressure is proven; else as measured, by UID, which names only the pods limited already.
  const attribution = observation.attribution ?? observation.measured;
  const limited = new Map(limits.map((l) => [l.uid, l]));
  /** The pods the reading lists, measured in full or not. */
  const listed = new Set<string>();
  for (const c of attribution?.consumers ?? []) {
    if (c.podUid) listed.add(c.podUid);
    const { readBytesPerSecond: rbps, writeBytesPerSecond: wbps } = c;
    const { readOpsPerSecond: riops, writeOpsPerSecond: wiops } = c;
    const podUid = c.podUid;
    const namespace = c.namespace ?? (podUid ? limited.get(podUid)?.namespace : undefined);
    const name = c.name ?? (podUid ? limited.get(podUid)?.name : undefined);
    if (c.kind !== 'Pod' || !podUid || !namespace || !name) continue;
    if (rbps === undefined || wbps === undefined || riops === undefined || wiops === undefined) continue;
    const pod = running?.get(podUid);
    pods.push({
      uid: podUid,
      namespace,
      name,
      sharePercent: c.sharePercent ?? 0,
      rates: { rbps, wbps, riops, wiops },
      ...(c.psiSomeAvg10Percent !== undefined ? { psiPercent: c.psiSomeAvg10Percent } : {}),
      exempt: pod?.labels[NO_LIMIT_LABEL] === 'true' || namespace === operatorNamespace,
    });
  }
  // A limited pod the reading does not list did less than those it lists (an idle device lists none), and on a disk
  // the reading finds quiet the agent attributes nothing: either way it presses no cap that matters. Without a reading
  // nothing is known of it, nor of one listed with a rate missing (unknown, not zero: its limit is not lifted on it).
  if (attribution || quietDisk)
    for (const l of limits)
      if (!listed.has(l.uid))
        pods.push({
          uid: l.uid,
          namespace: l.namespace,
          name: l.name,
          sharePercent: 0,
          rates: { rbps: 0, wbps: 0, riops: 0, wiops: 0 },
          exempt: running?.get(l.uid)?.labels[NO_LIMIT_LABEL] === 'true' || l.namespace === operatorNamespace,
        });
  return pods;
}
