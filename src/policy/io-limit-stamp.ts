// PURE: the stamps on the pods a node's IO limits are about (limitIo, ADR 0031). A pod with an entry in the node's
// spec.ioLimits carries them, saying whose limit, what it is and since when; a pod whose last entry went carries none.
// What each pod was last stamped with is the caller's: the operator does not watch running pods (ClusterCache).
import {
  IO_LIMIT_STAMP,
  IO_LIMIT_UNSTAMPED,
  type IoLimitRates,
  type IoLimitStampAnnotations,
  type WantedIoLimitSpec,
} from '../api/v1alpha1/index.js';
import type { PodRef } from './actions.js';

const RATE_KEYS = ['rbps', 'wbps', 'riops', 'wiops'] as const satisfies readonly (keyof IoLimitRates)[];

/** One device's limit as io.max writes it: `8:0 wbps=4194304 wiops=max` (the keys the limit sets, in io.max's order). */
export const ioMaxLine = (device: string, limit: IoLimitRates): string =>
  [device, ...RATE_KEYS.flatMap((k) => (limit[k] === undefined ? [] : [`${k}=${limit[k]}`]))].join(' ');

/** The stamps of a pod with these entries (one per device, any policy): their policies, limits, and the first since. */
export function ioLimitStamps(entries: readonly WantedIoLimitSpec[], uid: string): IoLimitStampAnnotations {
  const sorted = [...entries].sort((a, b) => a.device.localeCompare(b.device));
  const since = sorted.map((e) => e.since).sort((a, b) => Date.parse(a) - Date.parse(b))[0] ?? '';
  return {
    [IO_LIMIT_STAMP.policy]: [...new Set(sorted.map((e) => e.policy))].sort().join(','),
    [IO_LIMIT_STAMP.limit]: sorted.map((e) => ioMaxLine(e.device, e.limit)).join('; '),
    [IO_LIMIT_STAMP.since]: since,
    [IO_LIMIT_STAMP.uid]: uid,
  };
}

/** A pod as the operator last stamped it: on which node, and with what (undefined: it is gone). */
export interface StampedPod extends PodRef {
  node: string;
  stamps: IoLimitStampAnnotations | undefined;
}

export interface StampChange {
  node: string;
  pod: PodRef;
  annotations: IoLimitStampAnnotations;
}

/**
 * What to write so that each pod of the node's list carries the stamps of its entries, and each pod that the list no
 * longer names carries none: one last stamped on the node (`stamped`, by UID), or named in the list as read (`read`,
 * which a restarted operator has not stamped yet). A pod last found gone is not written again while it stays so.
 */
export function stampChanges(
  node: string,
  list: readonly WantedIoLimitSpec[],
  read: readonly WantedIoLimitSpec[],
  stamped: ReadonlyMap<string, StampedPod>,
): StampChange[] {
  const byPod = new Map<string, WantedIoLimitSpec[]>();
  for (const entry of list) byPod.set(entry.podUid, [...(byPod.get(entry.podUid) ?? []), entry]);
  const changes: StampChange[] = [];
  for (const [uid, entries] of byPod) {
    const last = stamped.get(uid);
    if (last && !last.stamps) continue; // gone
    const annotations = ioLimitStamps(entries, uid);
    if (last?.stamps && sameStamps(last.stamps, annotations)) continue;
    const pod = podRef(entries[0]?.pod ?? '', uid);
    if (pod) changes.push({ node, pod, annotations });
  }
  const unlisted = new Map<string, PodRef | undefined>();
  for (const [uid, last] of stamped)
    if (last.stamps && !byPod.has(uid))
      unlisted.set(uid, { namespace: last.namespace, name: last.name, uid });
  for (const entry of read)
    if (!byPod.has(entry.podUid) && !stamped.has(entry.podUid))
      unlisted.set(entry.podUid, podRef(entry.pod, entry.podUid));
  for (const pod of unlisted.values()) if (pod) changes.push({ node, pod, annotations: IO_LIMIT_UNSTAMPED });
  return changes;
}

const sameStamps = (a: IoLimitStampAnnotations, b: IoLimitStampAnnotations) =>
  Object.values(IO_LIMIT_STAMP).every((key) => a[key] === b[key]);

/** The pod an entry names (namespace/name), or undefined when the name does not parse. */
function podRef(pod: string, uid: string): PodRef | undefined {
  const [namespace, name, ...rest] = pod.split('/');
  return namespace && name && rest.length === 0 ? { namespace, name, uid } : undefined;
}
