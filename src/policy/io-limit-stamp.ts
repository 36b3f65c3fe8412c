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

/** A node's lists and what is known of its pods' stamps, for stampChanges. */
export interface NodeStampsInput {
  node: string;
  /** spec.ioLimits as this pass leaves it (the plan's, else as read). */
  list: readonly WantedIoLimitSpec[];
  /** spec.ioLimits as read: names pods a restarted operator has not stamped yet. */
  read: readonly WantedIoLimitSpec[];
  /** The pods (UIDs) the agent's report says a limit of ours is still in force on. */
  held: ReadonlySet<string>;
  /** What the operator last wrote on each pod of the node, by UID. */
  stamped: ReadonlyMap<string, StampedPod>;
}

/**
 * What to write so that each pod with a limit of ours carries stamps, and no other pod: a pod of the list carries its
 * entries' stamps; one the list no longer names keeps what it carries while the agent reports its limit in force (a
 * lift is done once the files hold what they held), and then carries none. A pod last found gone is not written again.
 */
export function stampChanges({ node, list, read, held, stamped }: NodeStampsInput): StampChange[] {
  const entriesOf = (of: readonly WantedIoLimitSpec[]) => {
    const byPod = new Map<string, WantedIoLimitSpec[]>();
    for (const entry of of) byPod.set(entry.podUid, [...(byPod.get(entry.podUid) ?? []), entry]);
    return byPod;
  };
  const listed = entriesOf(list);
  const wasListed = entriesOf(read);
  const changes: StampChange[] = [];
  const stamp = (uid: string, entries: readonly WantedIoLimitSpec[]) => {
    const last = stamped.get(uid);
    if (last && !last.stamps) return; // gone
    const annotations = ioLimitStamps(entries, uid);
    if (last?.stamps && sameStamps(last.stamps, annotations)) return;
    const pod = podRef(entries[0]?.pod ?? '', uid);
    if (pod) changes.push({ node, pod, annotations });
  };
  for (const [uid, entries] of listed) stamp(uid, entries);
  for (const uid of new Set([...stamped.keys(), ...wasListed.keys()])) {
    const last = stamped.get(uid);
    if (listed.has(uid) || (last && !last.stamps)) continue;
    const entries = wasListed.get(uid) ?? [];
    // Still in force: stamped as it was (a restarted operator stamps it from the list as read, if it can).
    if (held.has(uid)) {
      if (!last && entries.length > 0) stamp(uid, entries);
      continue;
    }
    const pod = last
      ? { namespace: last.namespace, name: last.name, uid }
      : podRef(entries[0]?.pod ?? '', uid);
    if (pod) changes.push({ node, pod, annotations: IO_LIMIT_UNSTAMPED });
  }
  return changes;
}

const sameStamps = (a: IoLimitStampAnnotations, b: IoLimitStampAnnotations) =>
  Object.values(IO_LIMIT_STAMP).every((key) => a[key] === b[key]);

/** The pod an entry names (namespace/name), or undefined when the name does not parse. */
function podRef(pod: string, uid: string): PodRef | undefined {
  const [namespace, name, ...rest] = pod.split('/');
  return namespace && name && rest.length === 0 ? { namespace, name, uid } : undefined;
}
