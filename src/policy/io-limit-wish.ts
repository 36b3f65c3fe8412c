// PURE: the operator's IO limits in the API and back (issue 44, ADR 0031). The limits a policy wants on a node's
// pods live in the node's SandboxHealth (spec.ioLimits), not in the operator's memory, so a restarted operator, or a
// policy forgotten, finds them again: each entry carries what decideLimits needs but the pod's quiet, which a restart
// counts again (the cautious side). Whether a limit is in force is the agent's word (status.ioLimits): a limit is
// Applied only once the report shows it applied as wanted, on the same device.
import type { AppliedIoLimitStatus, IoLimitReport, WantedIoLimitSpec } from '../api/v1alpha1/index.js';
import type { IoRates, PodLimit } from './io-limit.js';

const KEYS = ['rbps', 'wbps', 'riops', 'wiops'] as const;

/** Why the agent did not apply a wanted limit, as its report's last result for the pod says. */
const NOT_APPLIED = ['Refused', 'NoCgroup', 'Failed', 'PodGone'] as const;
type NotApplied = (typeof NOT_APPLIED)[number];

/** What the agent's report says of a wanted limit: applied as wanted, not (and why), or nothing yet. */
export type LimitState = 'Applied' | 'Pending' | NotApplied;

const notApplied = (result: string | undefined): result is NotApplied =>
  (NOT_APPLIED as readonly (string | undefined)[]).includes(result);

export interface ReadBack {
  /** The limits of this policy, as decideLimits takes them. */
  limits: PodLimit[];
  /** By "podUid device": what the agent's report says of each. */
  states: Map<string, LimitState>;
  /** Entries another policy wrote (one deleted, or the node's former owner): to be lifted. */
  others: WantedIoLimitSpec[];
  /** Entries that are none the operator writes (a rate missing or "max", a time unreadable): left alone, and said. */
  problems: string[];
}

export const limitKey = (limit: { podUid: string; device: string }) => `${limit.podUid} ${limit.device}`;

/** The pod an entry names (its `pod` is namespace/name, for people), as an Event or a limit refers to it. */
export function podOf(entry: Pick<WantedIoLimitSpec, 'pod' | 'podUid'>): {
  namespace: string;
  name: string;
  uid: string;
} {
  const [namespace = '', name = ''] = entry.pod.split('/');
  return { namespace, name, uid: entry.podUid };
}

/** The four rates as numbers, or undefined when one is missing or "max" (the operator always writes all four). */
function ratesOf(rates: WantedIoLimitSpec['limit'] | undefined): IoRates | undefined {
  if (!rates) return undefined;
  const out: Partial<IoRates> = {};
  for (const key of KEYS) {
    const value = rates[key];
    if (typeof value !== 'number') return undefined;
    out[key] = value;
  }
  return out as IoRates;
}

const date = (text: string | undefined) => {
  const at = text === undefined ? NaN : Date.parse(text);
  return Number.isNaN(at) ? undefined : new Date(at);
};

/** The limits as the SandboxHealth's spec.ioLimits holds them (what the operator writes). */
export function wishOf(limits: readonly PodLimit[], policy: string): WantedIoLimitSpec[] {
  return limits.map((l) => ({
    podUid: l.uid,
    pod: `${l.namespace}/${l.name}`,
    device: l.device,
    limit: { ...l.limit },
    policy,
    since: l.since.toISOString(),
    changedAt: l.changedAt.toISOString(),
    floor: { ...l.floor },
    ...(l.exhausted ? { exhausted: true } : {}),
  }));
}

/** The node's limits read back: this policy's, their state by the agent's report, and others' to lift. */
export function readBack(
  wish: readonly WantedIoLimitSpec[] | undefined,
  report: IoLimitReport | undefined,
  policy: string,
): ReadBack {
  const result: ReadBack = { limits: [], states: new Map(), others: [], problems: [] };
  // On cgroup v1 a limit is written in each of the pod's cgroups: applied once every one holds what is wanted.
  const applied = new Map<string, AppliedIoLimitStatus[]>();
  for (const a of report?.applied ?? []) applied.set(limitKey(a), [...(applied.get(limitKey(a)) ?? []), a]);
  // A result that says it is not applied outweighs another that says done; one about a device is about that limit
  // alone (an agent that names none speaks for the pod's every limit).
  const last = new Map<string, string>();
  for (const r of report?.results ?? []) {
    const key = r.device ? limitKey({ podUid: r.podUid, device: r.device }) : r.podUid;
    if (!notApplied(last.get(key))) last.set(key, r.result);
  }
  const reportedAt = date(report?.observedTime)?.getTime() ?? -Infinity;
  for (const entry of wish ?? []) {
    const key = limitKey(entry);
    const done = applied.get(key);
    // A result older than the limit's last change answers an earlier limit, not this one.
    const said =
      reportedAt >= (date(entry.changedAt ?? entry.since)?.getTime() ?? Infinity)
        ? (last.get(key) ?? last.get(entry.podUid))
        : undefined;
    // A result since the last change that says it is not applied outweighs records that all hold it: on v1 the
    // cgroups past the bound hold nothing, and have no record.
    result.states.set(
      key,
      notApplied(said)
        ? said
        : done && done.every((d) => sameRates(d.wanted, entry.limit))
          ? 'Applied'
          : 'Pending',
    );
    if (entry.policy !== policy) {
      result.others.push(entry);
      continue;
    }
    const limit = ratesOf(entry.limit);
    const floor = ratesOf(entry.floor);
    const since = date(entry.since);
    const changedAt = date(entry.changedAt);
    const { namespace, name } = podOf(entry);
    if (!limit || !floor || !since || !changedAt) {
      result.problems.push(
        `${entry.pod} (${key}): not a limit the operator wrote (a rate or a time missing)`,
      );
      continue;
    }
    result.limits.push({
      uid: entry.podUid,
      namespace,
      name,
      device: entry.device,
      limit,
      floor,
      since,
      changedAt,
      ...(entry.exhausted ? { exhausted: true as const } : {}),
    });
  }
  return result;
}

function sameRates(a: WantedIoLimitSpec['limit'], b: WantedIoLimitSpec['limit']): boolean {
  return KEYS.every((k) => a[k] === b[k]);
}
