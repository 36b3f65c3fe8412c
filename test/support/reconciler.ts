// The controllers over a MemoryCluster, wired by the same buildControllers the Manager uses, for reconcile tests:
// one place to build them, so a test says what it changes and what it expects, not how the parts are put together.
import { DryRunActuator } from '../../src/actuation/actuator.js';
import type { Applier } from '../../src/controllers/apply/applier.js';
import {
  buildControllers,
  type ControllerDeps,
  type Controllers,
} from '../../src/controllers/manager/wiring.js';
import { silentLogger } from '../../src/observability/log.js';
import { FakeClock } from '../../src/runtime/clock.js';
import type { ReconcileResult } from '../../src/runtime/controller.js';
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
  const pacing = () => new Map(controllers.pacer.publications().map((p) => [p.name, p]));
  return { clock, ...controllers, pacing };
}

/** A policy read from Prometheus whose IO pressure counts at once (no sustain) above PSI 40, with room to act. */
export const IO_SPEC = {
  detection: { stuckThresholdSeconds: 30 },
  ioPressure: {
    source: 'prometheus',
    prometheus: { url: 'http://prometheus:9090' },
    sustainSeconds: 0,
    thresholds: { psiSomeAvg10Percent: 40 },
  },
  safety: { maxUnhealthyNodes: 10, cooldownSeconds: 0 },
};

/** What the background asked of a queue, in order: a pass after `after` ms, or the apply queue's backoff. */
export interface Requeued {
  policy: string;
  after: number | 'backoff';
}

/**
 * The Manager's apply queue, run by hand: an apply scheduled starts at once, one per policy at a time (a policy
 * scheduled while its apply runs runs again after it); a failed one backs off until retry(), as if its backoff were
 * over.
 */
export class HandApplyQueue {
  private readonly running = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  private readonly backingOff = new Set<string>();
  /** Why each apply that failed failed, in order. */
  readonly errors: unknown[] = [];

  constructor(
    private readonly applier: () => Applier,
    private readonly onBackoff: (policy: string) => void,
  ) {}

  schedule(policy: string): void {
    if (this.running.has(policy)) this.again.add(policy);
    else this.start(policy);
  }

  /** Every backoff is over: their retries run (each asks for a pass of its policy). */
  async retry(): Promise<void> {
    const due = [...this.backingOff];
    this.backingOff.clear();
    for (const policy of due) this.schedule(policy);
    await this.idle();
  }

  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running.values());
  }

  private start(policy: string): void {
    const run = this.applier()
      .reconcile(policy)
      .then(
        () => undefined,
        (err: unknown) => {
          this.errors.push(err);
          this.backingOff.add(policy);
          this.onBackoff(policy);
        },
      )
      .finally(() => {
        this.running.delete(policy);
        if (this.again.delete(policy)) this.start(policy);
      });
    this.running.set(policy, run);
  }
}

/**
 * The policy controller and the apply controller as a test drives them: reconcile(policy) runs a retry whose backoff
 * is taken to be over, then the policy's pass, then waits for the apply it started and the reports it asked for (the
 * Manager does not wait: its passes go on meanwhile).
 */
export class SettledReconciler {
  constructor(
    private readonly controllers: Controllers,
    private readonly applies: HandApplyQueue,
  ) {}

  get lastPass() {
    return this.controllers.reconciler.lastPass;
  }

  markDirty(policy: string, node?: string): void {
    this.controllers.reconciler.markDirty(policy, node);
  }

  policyObserved(policy: string): void {
    this.controllers.reconciler.policyObserved(policy);
  }

  async reconcile(policy: string): Promise<ReconcileResult> {
    await this.applies.retry();
    try {
      return await this.controllers.reconciler.reconcile(policy);
    } finally {
      await this.idle();
    }
  }

  /** One pass as the Manager runs it: the applies it starts, and any already running, are not waited for. */
  pass(policy: string): Promise<ReconcileResult> {
    return this.controllers.reconciler.reconcile(policy);
  }

  /** Resolves once no apply runs and every report asked for is written. */
  idle(): Promise<void> {
    return settle(this.controllers, this.applies);
  }
}

/** Resolves once no apply runs (the hand-run queue's or the applier's) and every report asked for is written. */
export async function settle(
  controllers: Pick<Controllers, 'reconciler' | 'applier'>,
  applies: HandApplyQueue,
): Promise<void> {
  do {
    await applies.idle();
    await controllers.reconciler.idle();
  } while (controllers.applier.active);
}

/**
 * buildControllers, as a test reads them: the apply queue run by hand (HandApplyQueue), and `reconciler` settled
 * (SettledReconciler). `requeues` lists what the background asked of the queues, in order.
 */
export function settledControllers(deps: Omit<ControllerDeps, 'scheduleApply'>): Omit<
  Controllers,
  'reconciler'
> & {
  reconciler: SettledReconciler;
  requeues: Requeued[];
  applies: HandApplyQueue;
} {
  const requeues: Requeued[] = [];
  const applies = new HandApplyQueue(
    () => controllers.applier,
    (policy) => requeues.push({ policy, after: 'backoff' }),
  );
  const controllers: Controllers = buildControllers({
    ...deps,
    requeue: (policy, after) => {
      requeues.push({ policy, after });
      deps.requeue?.(policy, after);
    },
    scheduleApply: (policy) => {
      applies.schedule(policy);
    },
  });
  return { ...controllers, reconciler: new SettledReconciler(controllers, applies), requeues, applies };
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
