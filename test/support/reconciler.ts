// The controllers over a MemoryCluster, wired by the same buildControllers the Manager uses, for reconcile tests:
// one place to build them, so a test says what it changes and what it expects, not how the parts are put together.
import { DryRunActuator } from '../../src/actuation/actuator.js';
import { buildControllers, type ControllerDeps } from '../../src/controllers/wiring.js';
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
  const controllers = buildControllers({
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
