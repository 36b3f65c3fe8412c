// The remediation reconcile tests' world: an in-memory cluster with six nodes, the controllers over it as the
// Manager wires them (the apply queue run by hand), and readers of what they wrote.
import { silentLogger } from '../../src/observability/log.js';
import { DryRunActuator } from '../../src/actuation/actuator.js';
import { type SandboxHealthStatus } from '../../src/api/v1alpha1/index.js';
import type { ControllerDeps } from '../../src/controllers/manager/wiring.js';
import { settledControllers } from './reconciler.js';
import type { NodeView, PodView } from '../../src/detection/index.js';
import { FakeClock } from '../../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from './builders.js';
import { aNode, MemoryCluster, tellOfChanges } from './memory-cluster.js';

export const quiet = silentLogger;
export const NODES = ['n1', 'n2', 'n3', 'n4', 'n5', 'n6'];
export const HIGH = { psiSomeAvg10Percent: 55 };
export const LOW = { psiSomeAvg10Percent: 2 };
/** The first pass runs 60 s after T0: pods waiting since T0 are past the 30 s threshold. */
export const START = secondsAfter(T0, 60);
export const at = (seconds: number) => secondsAfter(START, seconds).toISOString();
export const IO_REASON = 'Sandbox creation stuck from IO under verified IO pressure';

/** Pressure is immediate; cooldown (120 s) outlasts recovery (30 s), so both visibly hold an undo. */
export function policySpec(
  safety: Record<string, unknown> = {},
  remediation: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    detection: { stuckThresholdSeconds: 30 },
    ioPressure: { sustainSeconds: 0, recoverySeconds: 30, staleAfterSeconds: 3600 },
    // The Node condition has its own tests (node-conditions.test.ts): these count the other writes.
    remediation: { nodeCondition: false, ...remediation },
    safety: { maxUnhealthyNodes: 1, cooldownSeconds: 120, maxEvictionsPerMinute: 10, ...safety },
  };
}

export interface WorldOptions {
  nodes?: NodeView[];
  /** Nodes whose IO reading is over the threshold; every other node reads low. */
  saturated?: string[];
  /** Without an IO source the nodes' IoPressureHigh is absent (detection only). */
  source?: boolean;
}

/** Six nodes, policy p, a polled IO source over `readings`; start() builds a reconciler (again: a restart). */
export function world(spec: Record<string, unknown>, options: WorldOptions = {}) {
  const nodes = options.nodes ?? NODES.map((n) => aNode(n));
  const saturated = new Set(options.saturated ?? ['n1']);
  const cluster = new MemoryCluster().addPolicy('p', spec).addNodes(...nodes);
  const readings = new Map<string, { psiSomeAvg10Percent: number }>(
    nodes.map((n) => [n.name, saturated.has(n.name) ? HIGH : LOW]),
  );
  const clock = new FakeClock(START.getTime());
  const sources: ControllerDeps['sources'] = () => ({
    kind: 'prometheus',
    pollMs: 10_000,
    refresh: () => Promise.resolve(),
    read: (node: string) => {
      const r = readings.get(node);
      return r
        ? { source: 'prometheus', observedTime: new Date(clock.now()).toISOString(), ...r }
        : undefined;
    },
  });
  const start = () => {
    const controllers = settledControllers({
      writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
      cache: cluster,
      writer: cluster,
      recorder: cluster,
      actuators: { real: cluster, dryRun: new DryRunActuator() },
      workloads: cluster,
      clock,
      logger: quiet,
      ...(options.source === false ? {} : { sources }),
    });
    tellOfChanges(cluster, controllers.reconciler);
    return controllers;
  };
  const { reconciler, sweeper, requeues, applies } = start();
  return { cluster, clock, readings, reconciler, sweeper, requeues, applies, start };
}

/** Pods stuck in ContainerCreating on `node` since T0, each with a NameReserved failure Event. */
export function stuckOn(
  cluster: MemoryCluster,
  node: string,
  names: string[],
  controllerKind?: string,
): PodView[] {
  const pods = names.map((name) => {
    const pod = aPod().named(name).onNode(node).waitingSince(T0).build();
    return controllerKind ? { ...pod, controllerKind } : pod;
  });
  cluster.pods.push(...pods);
  cluster.events.push(...pods.map((p) => anEvent().about(p).saying(nameReservedMessage(p)).build()));
  return pods;
}
export const replicaSetPodsOn = (cluster: MemoryCluster, node: string, ...names: string[]) =>
  stuckOn(cluster, node, names, 'ReplicaSet');

export const health = (cluster: MemoryCluster, node: string): SandboxHealthStatus =>
  cluster.health(node)!.status!;
export const condition = (cluster: MemoryCluster, node: string, type: string) =>
  cluster.health(node)?.status?.conditions?.find((c) => c.type === type);
export const policyCondition = (cluster: MemoryCluster, type: string) =>
  cluster.policy('p')?.status?.conditions?.find((c) => c.type === type);
/** Recorded actions, newest first, as "Kind target Outcome". */
export const actionsOf = (cluster: MemoryCluster, node: string) =>
  (health(cluster, node).actions ?? []).map((a) => `${a.kind} ${a.target} ${a.outcome}`);
export const blockedOf = (cluster: MemoryCluster, node: string) =>
  (health(cluster, node).blocked ?? []).map((b) => `${b.kind} ${b.target} ${b.guard}`);
export const evictionWrites = (cluster: MemoryCluster) =>
  cluster.writes.filter((w) => w.startsWith('evict '));

/** First-pass writes when only n1 changes its node: every SandboxHealth is created and written once. */
export const allHealthsCreated = NODES.flatMap((n) => [`create health/${n}`, `patch health/${n}`]);
/** First-pass Events for n1 with its stuck pods, before any remediation Event. */
export const detectedOnN1 = (...pods: string[]) => [
  'Node/n1 Warning SandboxCreationDegraded',
  'Node/n1 Warning IoPressureHigh',
  ...pods.map((p) => `Pod/${p} Warning SandboxCreationStuck`),
];

/** web-1 stuck on n1 and reported by a first pass whose writes the watch has not delivered yet. */
export async function reportedWhileLagging() {
  const w = world(policySpec(), { source: false });
  replicaSetPodsOn(w.cluster, 'n1', 'web-1');
  w.cluster.lagging = true;
  await w.reconciler.reconcile('p');
  w.cluster.takeWrites();
  w.cluster.takeEvents();
  return w;
}
