// PURE: a diagnosis as plain text for a terminal: a headline, then one section per question, tables aligned, times as
// ages. The JSON output has the absolute times.
import { consumerName } from '../policy/io-cause.js';
import type { PolicySummary } from './policy.js';
import type { AttentionNode, ClusterOverview, Diagnosis, NodeDiagnosis } from './schema.js';
import { formatAgo, formatDuration } from './time.js';

/** Messages are cut to this in text (the JSON has them whole). */
export const MAX_TEXT_MESSAGE = 300;

export function formatDiagnosis(d: Diagnosis): string {
  return safeForTerminal(d.kind === 'NodeDiagnosis' ? formatNodeDiagnosis(d) : formatClusterOverview(d));
}

/**
 * Event messages and names come from anyone who may write Events: control characters (an escape sequence could
 * rewrite the SRE's terminal) are shown as U+FFFD. Newlines and tabs are the formatter's own.
 */
export function safeForTerminal(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, '\ufffd');
}

/** Rows of cells as aligned columns (the last one unpadded), each line indented. */
export function table(rows: readonly (readonly string[])[], indent = '  '): string[] {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map(
    (row) =>
      indent +
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
        .join('  ')
        .trimEnd(),
  );
}

const cut = (text: string, max = MAX_TEXT_MESSAGE) =>
  text.length > max ? `${text.slice(0, max - 1)}…` : text;
const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();
const percent = (v: number | undefined) => (v === undefined ? 'unknown' : `${round(v)}%`);
const round = (v: number) => String(Math.round(v * 100) / 100);
/** Enough of a 64-hex sandbox id to find it with crictl, which takes a unique prefix. */
const shortId = (id: string) => (/^[0-9a-f]{64}$/.test(id) ? `${id.slice(0, 13)}…` : id);

function section(title: string, lines: readonly string[]): string[] {
  return ['', title, ...(lines.length > 0 ? lines : ['  none'])];
}

/** A titled table inside a section, "none" when it has no rows. */
function subTable(title: string, rows: readonly (readonly string[])[]): string[] {
  return [`  ${title}:`, ...(rows.length > 0 ? table(rows, '    ') : ['    none'])];
}

/** Who does the IO: the cause, then each consumer with its share and role, biggest first. */
function ioCauseSection(d: NodeDiagnosis): string[] {
  const cause = d.ioCause;
  if (!cause) return [];
  const rows = (cause.consumers ?? []).map((c) => [
    consumerName(c),
    c.sharePercent === undefined ? 'share unknown' : `${Math.round(c.sharePercent)}%`,
    c.role,
    c.psiSomeAvg10Percent === undefined ? '' : `its own IO pressure ${Math.round(c.psiSomeAvg10Percent)}%`,
  ]);
  return section(`Who does the IO: ${cause.cause}`, [`  ${cut(oneLine(cause.message))}`, ...table(rows)]);
}

const rate = (value: number | 'max' | undefined, unit: string) =>
  value === undefined || value === 'max' ? '-' : `${value} ${unit}`;

/** The IO limits wanted on the node's pods, and whether its agent applied them. */
function ioLimitsSection(d: NodeDiagnosis): string[] {
  if (d.ioLimits.length === 0) return [];
  const rows = d.ioLimits.map((l) => [
    l.pod,
    l.device,
    `read ${rate(l.limit.rbps, 'B/s')}, ${rate(l.limit.riops, 'ops/s')}`,
    `write ${rate(l.limit.wbps, 'B/s')}, ${rate(l.limit.wiops, 'ops/s')}`,
    l.exhausted ? `${l.state}, exhausted` : l.state,
    `since ${l.since}`,
  ]);
  return section('IO limits (limitIo)', table(rows));
}

/** The reads that failed, when any did. */
const notRead = (unavailable: readonly { what: string; message: string }[]) =>
  unavailable.length > 0
    ? section(
        'Not read',
        unavailable.map((u) => `  ${u.what}: ${u.message}`),
      )
    : [];

/** valid, dry run, paused, storm limit reached. */
function policyFlags(p: PolicySummary): string {
  if (!p.found) return 'not found';
  return [
    p.valid === false ? `INVALID (${p.problems.length} problem(s))` : 'valid',
    ...(p.dryRun ? ['dry run'] : []),
    ...(p.paused ? ['paused'] : []),
    ...(p.stormDetected ? ['storm limit reached'] : []),
  ].join(', ');
}

export function formatNodeDiagnosis(d: NodeDiagnosis): string {
  const lines = [d.summary];
  if (d.policy) lines.push(`  policy ${d.policy.name} (${policyFlags(d.policy)})`);
  lines.push(`  as of ${d.generatedAt}`);
  // The culprit first: it decides the remedy (a pod to move, the runtime to calm, or nothing to single out).
  lines.push(...ioCauseSection(d));
  lines.push(...ioLimitsSection(d));
  lines.push(...stuckPodsSection(d));
  lines.push(...ioSection(d));
  lines.push(...nodeEvidenceSection(d));
  lines.push(
    ...section(
      'Runtime',
      d.runtime
        ? [
            `  ${d.runtime.version}${d.runtime.predatesMountFix === true ? ' (predates the fixes)' : ''}${d.runtime.note ? `: ${d.runtime.note}` : ''}`,
          ]
        : ['  unknown: no SandboxHealth runtime and no Node'],
    ),
  );
  lines.push(...doneSection(d));
  lines.push(
    ...section(
      'Next (from what the status records; estimates where it says when)',
      table(
        d.next.map((n) => [
          n.action,
          n.text + (n.notBefore ? ` (not before ${n.notBefore}, ${timeFrom(d, n.notBefore)})` : ''),
        ]),
      ),
    ),
  );
  lines.push(
    ...section(
      'Blocking',
      table(
        d.blocking.map((b) => [
          b.name,
          cut(oneLine(b.message)) + (b.since ? ` (since ${timeFrom(d, b.since)})` : ''),
        ]),
      ),
    ),
  );
  lines.push(...notRead(d.unavailable));
  return `${lines.join('\n')}\n`;
}

/** "4m12s ago" or "in 1m05s": `time` seen from when the diagnosis was made. */
const timeFrom = (d: { generatedAt: string }, time: string) =>
  formatAgo(Math.trunc((Date.parse(d.generatedAt) - Date.parse(time)) / 1000));

function stuckPodsSection(d: NodeDiagnosis): string[] {
  const { stuckPods } = d;
  const degraded = stuckPods.degraded;
  const title = `Stuck pods (${stuckPods.count}${stuckPods.listed.length < stuckPods.count ? `, ${stuckPods.listed.length} listed` : ''})${degraded ? `: SandboxCreationDegraded=${degraded.status} ${degraded.reason}` : ''}`;
  if (stuckPods.listed.length === 0) return section(title, []);
  const rows = [['POD', 'WAITING', 'CAUSE', 'FAILURES', 'LATEST EVENT']];
  const details: string[][] = [];
  for (const pod of stuckPods.listed) {
    const event = pod.latestEvent;
    rows.push([
      `${pod.namespace}/${pod.name}`,
      formatDuration(pod.waitingSeconds),
      pod.runtime ? `${pod.cause} (${pod.runtime})` : pod.cause,
      `${pod.failureCount}+`,
      event ? `x${event.count}, ${formatAgo(event.ageSeconds)}` : 'none found',
    ]);
  }
  const lines = table(rows);
  for (const pod of stuckPods.listed) {
    if (!pod.reservedName && !pod.reservedFor && !pod.lastMessage) continue;
    details.push([`${pod.namespace}/${pod.name}`, '']);
    if (pod.reservedName || pod.reservedFor)
      details.push([
        '  reserved',
        `${pod.reservedName ?? '(name not in the message)'} is held by ${pod.reservedFor ? shortId(pod.reservedFor) : 'an unknown id'}`,
      ]);
    if (pod.lastMessage) details.push(['  message', cut(oneLine(pod.lastMessage))]);
  }
  if (details.length > 0) lines.push('', ...table(details));
  return section(title, lines);
}

function ioSection(d: NodeDiagnosis): string[] {
  const { reading, pressure, condition } = d.io;
  const title = reading
    ? `IO evidence (${reading.source}, observed ${formatAgo(reading.ageSeconds)}${reading.stale ? `, STALE: older than ${reading.staleAfterSeconds ?? '?'}s` : ''})`
    : 'IO evidence (no reading)';
  const rows: string[][] = [];
  if (condition)
    rows.push([
      'IoPressureHigh',
      `${condition.status} ${condition.reason} (${timeFrom(d, condition.lastTransitionTime)}): ${cut(oneLine(condition.message))}`,
    ]);
  if (pressure)
    rows.push([
      'readings',
      `${pressure.observation} for ${formatDuration(pressure.sinceSeconds)}${pressure.exceeded?.length ? ` (${pressure.exceeded.join(', ')})` : ''}`,
    ]);
  if (reading) {
    const limits = reading.thresholds;
    const value = (label: string, v: number | undefined, limit: number | undefined, unit = '%') => {
      if (v === undefined && label !== 'PSI some avg10') return;
      const shown = unit === '%' ? percent(v) : v === undefined ? 'unknown' : String(v);
      const over = v !== undefined && limit !== undefined && v >= limit;
      rows.push([
        label,
        `${shown}${limit !== undefined ? `  (threshold ${limit}${unit})${over ? '  OVER' : ''}` : ''}`,
      ]);
    };
    value('PSI some avg10', reading.psiSomeAvg10Percent, limits?.psiSomeAvg10Percent);
    value('PSI some avg60', reading.psiSomeAvg60Percent, undefined);
    value('PSI full avg10', reading.psiFullAvg10Percent, limits?.psiFullAvg10Percent);
    value('disk busy', reading.diskBusyPercent, limits?.diskBusyPercent);
    value('blocked tasks', reading.blockedProcesses, limits?.blockedProcesses, '');
    if (reading.conditionTrue !== undefined) rows.push(['node condition', String(reading.conditionTrue)]);
    for (const device of reading.devices)
      rows.push([
        `device ${device.name}`,
        `${round(device.busyPercent)}% busy, ${device.inFlight} in flight${device.awaitMs !== undefined ? `, await ${round(device.awaitMs)} ms` : ''}`,
      ]);
  }
  return section(title, table(rows));
}

function nodeEvidenceSection(d: NodeDiagnosis): string[] {
  const { dStateTasks, kworkerCpuPercent } = d.nodeEvidence;
  const lines = [
    `  kworker CPU: ${kworkerCpuPercent === undefined ? 'unknown' : `${round(kworkerCpuPercent)}% of a core`}`,
  ];
  if (dStateTasks.length === 0) lines.push('  D-state tasks: none in the latest reading');
  else
    lines.push(
      `  D-state tasks (${dStateTasks.length}, runtime ones first):`,
      ...table(
        [
          ['PID', 'COMM', 'WCHAN', 'RUNTIME'],
          ...dStateTasks.map((t) => [String(t.pid), t.comm, t.wchan ?? '?', t.runtime ? 'yes' : 'no']),
        ],
        '    ',
      ),
    );
  return section('Processes stuck in the kernel', lines);
}

function doneSection(d: NodeDiagnosis): string[] {
  const { done } = d;
  const lines: string[] = [];
  const record = done.remediation;
  const cordon =
    done.unschedulable === undefined
      ? 'no Node'
      : !done.unschedulable
        ? 'schedulable'
        : done.cordonedByOperator
          ? 'cordoned by the operator'
          : 'cordoned by someone else (the operator never uncordons it)';
  lines.push(`  node: ${cordon}`);
  if (record)
    lines.push(
      `  remediation: policy ${record.policy}${record.dryRun ? ' (dry run: nothing changed)' : ''} since ${timeFrom(d, record.since)}${record.taint ? `, taint ${record.taint}` : ''}: ${cut(oneLine(record.reason))}`,
    );
  const stamps = Object.entries(done.stamps);
  if (stamps.length > 0)
    lines.push('  stamps on the Node:', ...stamps.map(([k, v]) => `    ${k}=${cut(v, 160)}`));
  else if (done.unschedulable !== undefined) lines.push('  stamps on the Node: none');
  lines.push(
    ...subTable(
      `actions (${done.actions.length}, newest first)`,
      done.actions.map((a) => [
        formatAgo(a.ageSeconds),
        a.kind,
        a.target,
        `${a.outcome}${a.dryRun ? ' (dry run)' : ''}`,
        a.reason,
      ]),
    ),
    ...subTable(
      `operator Events on the Node (${done.nodeEvents.length})`,
      done.nodeEvents.map((e) => [
        formatAgo(e.ageSeconds),
        e.type,
        e.reason,
        `x${e.count}`,
        cut(oneLine(e.message), 160),
      ]),
    ),
    ...subTable(
      `rollouts held (${done.heldRollouts.length})`,
      done.heldRollouts.map((p) => [
        `${p.kind.toLowerCase()}/${p.namespace}/${p.name}`,
        p.reason,
        `since ${formatAgo(p.sinceSeconds)}`,
        p.feedsThisNode ? 'its pods were stuck here' : '',
      ]),
    ),
    ...subTable(
      `pods held at the pacing gate (${done.gatedPods.count}${done.gatedPods.count > done.gatedPods.oldest.length ? `, oldest ${done.gatedPods.oldest.length} listed` : ''})`,
      done.gatedPods.oldest.map((p) => [`${p.namespace}/${p.name}`, `gated ${formatAgo(p.sinceSeconds)}`]),
    ),
  );
  return section('What the operator did', lines);
}

export function formatClusterOverview(o: ClusterOverview): string {
  const lines = [o.summary, `  as of ${o.generatedAt}`];
  if (o.attention.length > 0) {
    lines.push(
      '',
      ...table([
        ['NODE', 'STATE', 'STUCK', 'CORDONED', 'IO READING', 'LAST ACTION', 'WHY'],
        ...o.attention.map((a) => attentionRow(a)),
      ]),
    );
    lines.push('', `  Details: sandbox-remediator diagnose ${o.attention[0]?.node ?? 'NODE'}`);
  }
  if (o.unwatchedNodes.length > 0)
    lines.push(
      '',
      `Without a SandboxHealth: ${o.unwatchedNodes.join(', ')}${o.nodes - o.watchedNodes > o.unwatchedNodes.length ? ', ...' : ''}`,
    );
  lines.push(...section('Policies', table(o.policies.map((p) => [p.name, policyFlags(p)]))));
  lines.push(...notRead(o.unavailable));
  return `${lines.join('\n')}\n`;
}

function attentionRow(a: AttentionNode): string[] {
  const cordoned =
    a.unschedulable === undefined
      ? 'no Node'
      : !a.unschedulable
        ? 'no'
        : a.cordonedByOperator
          ? 'by operator'
          : 'by others';
  return [
    a.node,
    a.state,
    String(a.stuckPodCount),
    cordoned,
    a.io ? `${a.io.source}, ${formatAgo(a.io.ageSeconds)}` : 'none',
    a.lastAction
      ? `${a.lastAction.text}${a.lastAction.ageSeconds !== undefined ? `, ${formatAgo(a.lastAction.ageSeconds)}` : ''}`
      : '-',
    a.why,
  ];
}
