// Reconcile cost of one change: how long a policy's reconcile takes after one pod on one node changed, when it
// re-observes only that node (what the operator does) against a full pass over every node it owns (what it did
// before, and still does on time-based waits). In memory (the reconciler over test/support's MemoryCluster), so
// the figure is the operator's own CPU, not the apiserver's; the same run measures both, side by side.
//
//   npx tsx bench/reconcile-cost.ts [--nodes 1000] [--pods-per-node 30] [--rounds 50]
import { silentLogger } from '../src/observability/log.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DryRunActuator } from '../src/actuation/actuator.js';
import { buildControllers } from '../src/controllers/wiring.js';
import { FakeClock } from '../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../test/support/builders.js';
import { aNode, MemoryCluster } from '../test/support/memory-cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import type { PodView } from '../src/detection/index.js';
import { percentile } from './stats.js';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const NODES = arg('--nodes', 1000);
const PODS_PER_NODE = arg('--pods-per-node', 30);
const ROUNDS = arg('--rounds', 50);
/** --profile-incremental: only one-pod-change rounds, for a CPU profile of that path alone. */
const PROFILE_INCREMENTAL = process.argv.includes('--profile-incremental');
const quiet = silentLogger;

/** Pods indexed by node, as the operator's informer cache keeps them (MemoryCluster scans every pod). */
class IndexedCluster extends MemoryCluster {
  private readonly byNode = new Map<string, PodView[]>();
  addPod(pod: PodView): void {
    this.pods.push(pod);
    const list = this.byNode.get(pod.nodeName ?? '');
    if (list) list.push(pod);
    else this.byNode.set(pod.nodeName ?? '', [pod]);
  }
  override pendingPodsOn(nodeName: string): PodView[] {
    return this.byNode.get(nodeName) ?? [];
  }
}

const names = Array.from({ length: NODES }, (_, i) => `n${String(i).padStart(4, '0')}`);
const cluster = new IndexedCluster()
  .addPolicy('p', { detection: { stuckThresholdSeconds: 30 }, safety: { maxUnhealthyNodes: '10%' } })
  .addNodes(...names.map((n) => aNode(n)));
// Pending pods everywhere (starting, not stuck yet), and 2 % of the nodes with stuck NameReserved pods.
const clock = new FakeClock(secondsAfter(T0, 600).getTime());
for (const [i, node] of names.entries()) {
  for (let j = 0; j < PODS_PER_NODE; j++) {
    const stuck = i % 50 === 0 && j < 3;
    const pod = aPod()
      .named(`p-${i}-${j}`)
      .onNode(node)
      .waitingSince(stuck ? T0 : new Date(clock.now() - 1000))
      .build();
    cluster.addPod(pod);
    if (stuck) cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
  }
}
const reconciler = buildControllers({
  cache: cluster,
  writer: cluster,
  recorder: cluster,
  actuators: { real: new DryRunActuator(), dryRun: new DryRunActuator() },
  clock,
  logger: quiet,
  resyncMs: 3_600_000,
}).reconciler;
await reconciler.reconcile('p'); // the first pass writes every SandboxHealth; what follows measures changes
await reconciler.reconcile('p');

/** One round: a pod on one node changes (a new stuck pod there), then the reconcile the mapper triggers. */
async function round(i: number, full: boolean): Promise<{ ms: number; observed: number }> {
  const node = names[(i * 37) % NODES]!;
  const pod = aPod()
    .named(`extra-${full ? 'f' : 'i'}-${i}`)
    .onNode(node)
    .waitingSince(T0)
    .build();
  cluster.addPod(pod);
  cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
  reconciler.markDirty('p', full ? undefined : node);
  const started = performance.now();
  await reconciler.reconcile('p');
  const ms = performance.now() - started;
  return { ms, observed: reconciler.lastPass?.observed ?? -1 };
}

const incremental: number[] = [];
const fullPass: number[] = [];
let observedIncremental = 0;
for (let i = 0; i < ROUNDS; i++) {
  // Interleaved, so both see the same machine state.
  const a = await round(i, false);
  const b = PROFILE_INCREMENTAL ? a : await round(i, true);
  incremental.push(a.ms);
  fullPass.push(b.ms);
  observedIncremental = Math.max(observedIncremental, a.observed);
}
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const p = (xs: number[], q: number) => percentile(sorted(xs), q);
const summary = (xs: number[]) => ({
  p50Ms: Number(p(xs, 0.5).toFixed(3)),
  p99Ms: Number(p(xs, 0.99).toFixed(3)),
});
const result = {
  date: new Date().toISOString(),
  nodes: NODES,
  pendingPods: cluster.pods.length,
  rounds: ROUNDS,
  onePodChange: { ...summary(incremental), nodesObserved: observedIncremental },
  fullPass: { ...summary(fullPass), nodesObserved: NODES },
  ratioP50: Number((p(fullPass, 0.5) / p(incremental, 0.5)).toFixed(1)),
};
console.log(JSON.stringify(result, null, 2));
writeFileSync(
  join(REPO_ROOT, 'bench', 'results', `reconcile-cost-${NODES}.json`),
  `${JSON.stringify(result, null, 2)}\n`,
);
