// PURE: the demo's timeline, drawn from what the cluster recorded: the operator's Events, kubelet's sandbox
// failures, the actions in a SandboxHealth status (those no Event tells), and the few things the demo itself did
// (marked as the demo's), with the IO evidence the demo read from the SandboxHealth status when IoPressureHigh held.
import type { CoreV1Event } from '@kubernetes/client-node';
import type { ActionRecord } from '../../src/api/v1alpha1/index.js';
import { ACTION_WORDS } from '../../src/status/remediation-status.js';

export interface TimelineEntry {
  /** ISO time. Events carry whole seconds; status and the demo's own marks carry milliseconds. */
  time: string;
  /** operator, kubelet, agent (IO evidence from its readings) or demo (what the script did). */
  actor: string;
  /** kind/name or kind/namespace/name, as the operator's action targets are written. */
  object: string;
  reason: string;
  message: string;
  /**
   * The demo's answer to what the operator did (the neighbour's load ending with its evicted pod): after the
   * operator's entries of its second, where the demo's own acts go before them.
   */
  reaction?: boolean;
}

/** The part of a recorded action (status.actions) the timeline reads. */
export type StatusAction = Pick<ActionRecord, 'kind' | 'target' | 'time' | 'outcome' | 'reason' | 'message'>;

const OPERATOR = 'sandbox-remediator';
const objectOf = (e: CoreV1Event) => {
  const o = e.involvedObject;
  return `${(o.kind ?? '?').toLowerCase()}/${o.namespace ? `${o.namespace}/` : ''}${o.name ?? '?'}`;
};
const timeOf = (e: CoreV1Event) =>
  new Date(e.eventTime ?? e.firstTimestamp ?? e.metadata.creationTimestamp ?? 0).toISOString();
const revision = (e: CoreV1Event) => Number(e.metadata.resourceVersion ?? 0);

export function buildTimeline(input: {
  since: Date;
  events: readonly CoreV1Event[];
  actions: readonly StatusAction[];
  extra: readonly TimelineEntry[];
}): TimelineEntry[] {
  const ranked: { entry: TimelineEntry; rank: number; order: number }[] = [];
  const recent = [...input.events]
    .filter((e) => new Date(timeOf(e)) >= input.since)
    // Events stamp whole seconds; the apiserver's write order breaks ties within one.
    .sort((a, b) => revision(a) - revision(b));

  const ours = recent.filter((e) => e.source?.component === OPERATOR);
  for (const e of ours)
    ranked.push({
      entry: {
        time: timeOf(e),
        actor: 'operator',
        object: objectOf(e),
        reason: e.reason ?? '?',
        message: e.message ?? '',
      },
      rank: 1,
      order: revision(e),
    });

  // kubelet's failures: the first, with how many pods and Events followed.
  // (An Event kubelet repeats is updated in place: its write order is its latest repeat, its first time is not.)
  const failures = recent
    .filter((e) => e.reason === 'FailedCreatePodSandBox')
    .sort((a, b) => Date.parse(timeOf(a)) - Date.parse(timeOf(b)));
  const first = failures[0];
  if (first) {
    const pods = new Set(failures.map(objectOf));
    const count = failures.reduce((n, e) => n + Math.max(1, e.count ?? 1), 0);
    ranked.push({
      entry: {
        time: timeOf(first),
        actor: 'kubelet',
        object: objectOf(first),
        reason: 'FailedCreatePodSandBox',
        message: `${first.message ?? ''} (the first of ${count} on ${pods.size} pod(s))`,
      },
      rank: 1,
      order: revision(first),
    });
  }

  // Actions only the status tells (an Event can be lost; the status is rewritten until it holds).
  const told = (a: StatusAction) =>
    ours.some(
      (e) =>
        objectOf(e) === a.target &&
        e.reason === ACTION_WORDS[a.kind].event &&
        Math.abs(new Date(timeOf(e)).getTime() - new Date(a.time).getTime()) <= 2000,
    );
  input.actions
    .filter((a) => new Date(a.time) >= input.since && !told(a))
    .forEach((a, i) =>
      ranked.push({
        entry: {
          time: new Date(a.time).toISOString(),
          actor: 'operator',
          object: a.target,
          reason: `${a.kind} ${a.outcome}`,
          message: a.message ?? a.reason,
        },
        rank: 2,
        order: i,
      }),
    );

  input.extra.forEach((entry, i) => ranked.push({ entry, rank: entry.reaction ? 3 : 0, order: i }));

  const second = (t: string) => Math.floor(new Date(t).getTime() / 1000);
  return ranked
    .sort(
      (a, b) =>
        second(a.entry.time) - second(b.entry.time) ||
        a.rank - b.rank ||
        (a.rank === 0 || a.rank === 3
          ? new Date(a.entry.time).getTime() - new Date(b.entry.time).getTime()
          : 0) ||
        a.order - b.order,
    )
    .map((r) => r.entry);
}

/** One line per entry: time since `start`, who, what object, the reason and as much message as fits. */
export function formatTimeline(entries: readonly TimelineEntry[], start: Date, width = 120): string {
  // Whole seconds as the entries are ordered (Events carry no more): a mark at .6 s prints in its own second.
  const second = (t: Date) => Math.floor(t.getTime() / 1000);
  const since = (t: string) => {
    const s = Math.max(0, second(new Date(t)) - second(start));
    return `+${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
  };
  const objectWidth = Math.min(40, Math.max(6, ...entries.map((e) => e.object.length)));
  const reasonWidth = Math.min(24, Math.max(6, ...entries.map((e) => e.reason.length)));
  const header = `${'TIME'.padEnd(6)}  ${'BY'.padEnd(8)}  ${'OBJECT'.padEnd(objectWidth)}  ${'REASON'.padEnd(reasonWidth)}  MESSAGE`;
  const lines = entries.map((e) => {
    const line = `${since(e.time)}  ${e.actor.padEnd(8)}  ${e.object.padEnd(objectWidth)}  ${e.reason.padEnd(reasonWidth)}  ${e.message.replace(/\s+/g, ' ')}`;
    return line.length > width ? `${line.slice(0, width - 1)}…` : line;
  });
  return [header, ...lines].join('\n');
}
