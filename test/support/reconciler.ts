// The controllers over a MemoryCluster, wired by the same buildControllers the Manager uses, for reconcile tests:
// one place to build them, so a test says what it changes and what it expects, not how the parts are put together.
import { DryRunActuator } from '../../src/actuation/actuator.js';
import type { Requeue } from '../../src/controllers/sandboxpolicy/pass.js';
import { buildControllers, type ControllerDeps, type Controllers } from '../../src/controllers/manager/wiring.js';
import { silentLogger } from '../../src/observability/log.js';
import { FakeClock } from '../../src/runtime/clock.js';
import { secondsAfter, T0 } from './builders.js';
import { MemoryCluster, tellOfChanges } from './memory-cluster.js';

export interface ReconcilerOptions extends Partial<Omit<ControllerDeps, 'cache' | 'clock'>> {
  /** Seconds after T0 the fake clock starts at. */
  startSeconds?: number;
}

export function aReconciler(cluster: MemoryCluster, options: ReconcilerOptions = {}) {
  const { startSeconds = 0, ...deps } = options;
  const clock = new FakeClock(secondsAfter(T0, startSeconds).getTime());
  const controllers = settledControllers({
    writeConcurrency: 1, // one write at a time: the tests assert the exact order of writes
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: cluster, dryRun: new DryRunActuator() },
    workloads: cluster,
    clock,
    logger: silentLogger,
    ...deps,
  });
  tellOfChanges(cluster, controllers.reconciler);
  /** What the pacing webhook reads now, by policy. */
  const pacing = () => new Map(controllers.memories.pacing().map((p) => [p.name, p]));
  return { clock, ...controllers, pacing };
}

/**
 * buildControllers, as a test reads them: each reconcile returns once what it decided is carried out and every report
 * it asked for is written (the Manager does not wait: its passes go on meanwhile). `requeues` lists what the
 * background asked of the queue, in order.
 */
export function settledControllers(
  deps: ControllerDeps,
): Controllers & { requeues: { policy: string; after: Requeue }[] } {
  const requeues: { policy: string; after: Requeue }[] = [];
  const controllers = buildControllers({
    ...deps,
    requeue: (policy, after) => {
      requeues.push({ policy, after });
      deps.requeue?.(policy, after);
    },
  });
  const { reconciler } = controllers;
  const reconcile = reconciler.reconcile.bind(reconciler);
  reconciler.reconcile = async (name) => {
    try {
      return await reconcile(name);
    } finally {
      await reconciler.idle();
    }
  };
  return { ...controllers, requeues };
}

/**
 * Writes grouped by the object they change ("patch node/n1" under node/n1), each object's in order: what a pass
 * writes, whatever the interleaving of independent objects' writes (the reports and the decision's own go side by
 * side).
 */
export function byObject(writes: readonly string[]): Record<string, string[]> {
  const grouped: Record<string, string[]> = {};
  for (const write of writes) {
    const object = write.slice(write.lastIndexOf(' ') + 1);
    (grouped[object] ??= []).push(write);
  }
  return grouped;
}

/** Whether `first` was written before `then`, each looked up by its first occurrence. */
export function writtenBefore(writes: readonly string[], first: string, then: string): boolean {
  const a = writes.indexOf(first);
  const b = writes.indexOf(then);
  return a >= 0 && b >= 0 && a < b;
}
