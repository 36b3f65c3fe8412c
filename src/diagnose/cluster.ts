// PURE: the nodes that need attention across the cluster, worst first.
import type { NodeState } from '../api/v1alpha1/index.js';
import type { HealthObject } from '../ports/cluster.js';
import type { ClusterOverviewInput, DiagnosedNode } from './inputs.js';
import { readingAgeSeconds } from './node.js';
import { summarisePolicy } from './policy.js';
import type { AttentionNode, ClusterOverview } from './schema.js';
import { ageSeconds } from './time.js';

/** Unwatched nodes listed by name; the summary counts them all. */
export const MAX_LISTED_UNWATCHED = 20;

/**
 * Worst first: IO proven and nothing done yet, then being remediated, stuck without proof, no data, recovering, and
 * last a healthy node still carrying the operator's stamps.
 */
const SEVERITY: Record<NodeState, number> = {
  IoPressure: 0,
  Remediating: 1,
  Degraded: 2,
  Unknown: 3,
  Recovering: 4,
  Healthy: 5,
};

const WHY: Record<NodeState, string> = {
  IoPressure: 'pods stuck and IO pressure proven; nothing done yet',
  Remediating: 'the operator is remediating it',
  Degraded: 'pods stuck; IO pressure not proven',
  Unknown: 'the operator has no data on it yet',
  Recovering: 'IO pressure gone; waiting recoverySeconds before undoing',
  Healthy: "healthy, but it still carries the operator's stamps",
};

export function diagnoseCluster(input: ClusterOverviewInput): ClusterOverview {
  const { now } = input;
  const nodes = new Map(input.nodes.map((n) => [n.view.name, n]));
  const healths = new Map(input.healths.map((h) => [h.nodeName ?? h.name, h]));
  const attention: AttentionNode[] = [];
  for (const [name, health] of healths) {
    const entry = attentionEntry(name, health, nodes.get(name), now);
    if (entry) attention.push(entry);
  }
  for (const [name, node] of nodes) {
    if (healths.has(name) || !node.view.stamps) continue;
    attention.push({
      node: name,
      state: 'Unknown',
      policy: node.view.stamps.policy,
      stuckPodCount: 0,
      unschedulable: node.view.unschedulable,
      cordonedByOperator: node.view.stamps.cordoned,
      why: "carries the operator's stamps but has no SandboxHealth",
    });
  }
  attention.sort(
    (a, b) =>
      SEVERITY[a.state] - SEVERITY[b.state] ||
      b.stuckPodCount - a.stuckPodCount ||
      a.node.localeCompare(b.node),
  );
  const unwatched = [...nodes.keys()].filter((n) => !healths.has(n)).sort();
  const overview: ClusterOverview = {
    kind: 'ClusterOverview',
    generatedAt: now.toISOString(),
    summary: '',
    watchedNodes: healths.size,
    nodes: nodes.size,
    unwatchedNodes: unwatched.slice(0, MAX_LISTED_UNWATCHED),
    attention,
    policies: input.policies
      .map((p) => summarisePolicy(p.name, p).summary)
      .sort((a, b) => a.name.localeCompare(b.name)),
    unavailable: [...input.unavailable],
  };
  overview.summary = summarise(overview, unwatched.length);
  return overview;
}

function attentionEntry(
  name: string,
  health: HealthObject,
  node: DiagnosedNode | undefined,
  now: Date,
): AttentionNode | undefined {
  const status = health.status;
  const state = status?.state ?? 'Unknown';
  const stamps = node?.view.stamps;
  if (state === 'Healthy' && !stamps) return undefined;
  const entry: AttentionNode = {
    node: name,
    state,
    stuckPodCount: status?.stuckPodCount ?? 0,
    cordonedByOperator: stamps?.cordoned === true,
    why: node ? WHY[state] : `${WHY[state]}; the Node no longer exists`,
  };
  const policy = status?.policy ?? stamps?.policy;
  if (policy) entry.policy = policy;
  if (node) entry.unschedulable = node.view.unschedulable;
  const reading = status?.ioReading;
  if (reading)
    entry.io = {
      source: reading.source,
      observedTime: reading.observedTime,
      ageSeconds: readingAgeSeconds(reading, health.readingWrittenTime, now),
    };
  const latest = status?.actions?.[0];
  if (latest)
    entry.lastAction = {
      text: status.lastAction ?? `${latest.kind} ${latest.outcome}`,
      time: latest.time,
      ageSeconds: ageSeconds(latest.time, now),
    };
  else if (status?.lastAction) entry.lastAction = { text: status.lastAction };
  return entry;
}

function summarise(overview: ClusterOverview, unwatched: number): string {
  const rest = unwatched > 0 ? `; ${unwatched} node(s) without a SandboxHealth (no policy selects them)` : '';
  if (overview.watchedNodes === 0 && overview.attention.length === 0)
    return overview.policies.length === 0
      ? 'no SandboxPolicy, so no node is watched: apply one (config/samples)'
      : `no node has a SandboxHealth yet (is the operator running?)${rest}`;
  if (overview.attention.length === 0) return `all ${overview.watchedNodes} nodes healthy${rest}`;
  return `${overview.attention.length} of ${overview.watchedNodes} watched node(s) need attention${rest}`;
}
