// Reconcile cost of one change: how long a policy's reconcile takes after one pod on one node changed, when it
// re-observes only that node (what the operator does) against a full pass over every node it owns (what it does on
// time-based waits and at the resync). In memory (the reconciler over test/support's MemoryCluster, pods indexed by
// node as the informer cache keeps them), so the figure is the operator's own CPU, not the apiserver's.
//
// Side by side in one run, interleaved round by round: the reconciler at HEAD and the one at --before (its src/ and
// test/support/ from git, under scratch/, so that both resolve this checkout's node_modules), each over a world of its
// own built the same way. Prints and writes bench/results/reconcile-cost-<nodes>.json: HEAD's figures, the before
// tree's, and HEAD / before as ratios (below 1: HEAD is faster).
//
//   npx tsx bench/reconcile-cost.ts [--nodes 1000] [--pods-per-node 30] [--rounds 50] [--before 974be47] [--overlap]
//     [--stream]
//
// --stream: one-pod changes one after another, with no full pass between them (the operator's steady state: its
// full pass comes at the resync, or a poll); by default each round is a one-pod change, then a full pass.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DryRunActuator } from '../src/actuation/actuator.js';
import { buildControllers } from '../src/controllers/manager/wiring.js';
import type { PodView } from '../src/detection/index.js';
import { silentLogger } from '../src/observability/log.js';
import { FakeClock } from '../src/runtime/clock.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../test/support/builders.js';
import { aNode, MemoryCluster } from '../test/support/memory-cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { percentile } from './stats.js';
import { arg } from './args.js';

const NODES = Number(arg('--nodes', '1000'));
const PODS_PER_NODE = Number(arg('--pods-per-node', '30'));
const ROUNDS = Number(arg('--rounds', '50'));
/** The commit before issue 24's restructuring. */
const BEFORE = arg('--before', '974be47');
/** Start each round while the last decision's apply may still run, as the bench did before issue 43 closed. */
const OVERLAP = process.argv.includes('--overlap');
const STREAM = process.argv.includes('--stream');

/** What both trees offer a round: mark a node (or everything) dirty, reconcile, say how many nodes it looked at. */
interface Tree {
  addPod(pod: PodView): void;
  markDirty(node: string | undefined): void;
  reconcile(): Promise<number>;
  /** Until the decision's apply and the reports it asked for are done: between rounds, not timed. */
  settle(): Promise<void>;
}

type Cluster = MemoryCluster & { addPod(pod: PodView): void };

/** A MemoryCluster (of either tree) that indexes pods by node, as the operator's informer cache does. */
function indexed(Base: typeof MemoryCluster): Cluster {
  class Indexed extends Base {
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
  return new Indexed();
}

const names = Array.from({ length: NODES }, (_, i) => `n${String(i).padStart(4, '0')}`);

/** Pending pods everywhere (starting, not stuck yet), and 2 % of the nodes with stuck NameReserved pods. */
function populate(cluster: Cluster, nodeOf: (name: string) => ReturnType<typeof aNode>, now: number): void {
  cluster
    .addPolicy('p', { detection: { stuckThresholdSeconds: 30 }, safety: { maxUnhealthyNodes: '10%' } })
    .addNodes(...names.map(nodeOf));
  for (const [i, node] of names.entries()) {
    for (let j = 0; j < PODS_PER_NODE; j++) {
      const stuck = i % 50 === 0 && j < 3;
      const pod = aPod()
        .named(`p-${i}-${j}`)
        .onNode(node)
        .waitingSince(stuck ? T0 : new Date(now - 1000))
        .build();
      cluster.addPod(pod);
      if (stuck) cluster.events.push(anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    }
  }
}

function headTree(): Tree {
  const clock = new FakeClock(secondsAfter(T0, 600).getTime());
  const cluster = indexed(MemoryCluster);
  populate(cluster, (n) => aNode(n), clock.now());
  // Each decision applied at once, in the background, as the before tree's carry-out did: the pass is what is timed.
  const { reconciler, applier } = buildControllers({
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: new DryRunActuator(), dryRun: new DryRunActuator() },
    clock,
    logger: silentLogger,
    resyncMs: 3_600_000,
    scheduleApply: (policy) => {
      void applier.reconcile(policy).catch(() => undefined);
    },
  });
  return {
    addPod: (pod) => {
      cluster.addPod(pod);
    },
    markDirty: (node) => {
      reconciler.markDirty('p', node);
    },
    reconcile: async () => {
      await reconciler.reconcile('p');
      return reconciler.lastPass?.observed ?? -1;
    },
    settle: () => reconciler.idle(),
  };
}

/** The before tree's reconciler, over its own MemoryCluster; its source from git. */
async function beforeTree(dir: string): Promise<Tree> {
  const load = async <T>(path: string) => (await import(pathToFileURL(join(dir, path)).href)) as T;
  const support = await load<{ MemoryCluster: typeof MemoryCluster; aNode: typeof aNode }>(
    'test/support/memory-cluster.ts',
  );
  const { DryRunActuator: OldDryRun } = await load<{ DryRunActuator: typeof DryRunActuator }>(
    'src/actuation/actuator.ts',
  );
  const { FakeClock: OldClock } = await load<{ FakeClock: typeof FakeClock }>('src/runtime/clock.ts');
  const clock = new OldClock(secondsAfter(T0, 600).getTime());
  const cluster = indexed(support.MemoryCluster);
  populate(cluster, (n) => support.aNode(n), clock.now());
  // A tree with an apply controller (issue 43) applies each decision at once, in the background, as head's does.
  const late: { applier?: { reconcile(policy: string): Promise<unknown> } | undefined } = {};
  const deps = {
    cache: cluster,
    writer: cluster,
    recorder: cluster,
    actuators: { real: new OldDryRun(), dryRun: new OldDryRun() },
    clock,
    logger: silentLogger,
    resyncMs: 3_600_000,
    scheduleApply: (policy: string) => {
      void late.applier?.reconcile(policy).catch(() => undefined);
    },
  };
  interface OldReconciler {
    reconcile(name: string): Promise<unknown>;
    markDirty(policy: string, node?: string): void;
    /** Every tree since issue 24's carry-out has one. */
    idle?(): Promise<void>;
    lastPass?: { observed: number };
  }
  // A tree from after issue 24 builds its reconciler with the concerns it shares (controllers/wiring.ts, in
  // controllers/manager/ since issue 43); one before it builds the reconciler alone.
  const wiringAt = ['src/controllers/manager/wiring.ts', 'src/controllers/wiring.ts'].find((p) =>
    existsSync(join(dir, p)),
  );
  const built = wiringAt
    ? (
        await load<{
          buildControllers: (d: typeof deps) => { reconciler: OldReconciler; applier?: typeof late.applier };
        }>(wiringAt)
      ).buildControllers(deps)
    : undefined;
  late.applier = built?.applier;
  const reconciler = built
    ? built.reconciler
    : new (
        await load<{ PolicyReconciler: new (d: typeof deps) => OldReconciler }>(
          'src/controllers/policy-reconciler.ts',
        )
      ).PolicyReconciler(deps);
  return {
    addPod: (pod) => {
      cluster.addPod(pod);
    },
    markDirty: (node) => {
      reconciler.markDirty('p', node);
    },
    reconcile: async () => {
      await reconciler.reconcile('p');
      return reconciler.lastPass?.observed ?? -1;
    },
    settle: async () => {
      await reconciler.idle?.();
    },
  };
}

/** One round: a pod on one node changes (a new stuck pod there), then the reconcile the mapper triggers. */
async function round(
  tree: Tree,
  i: number,
  full: boolean,
): Promise<{ ms: number; observed: number; withApply: number }> {
  const node = names[(i * 37) % NODES] ?? 'n0000';
  const pod = aPod()
    .named(`extra-${full ? 'f' : 'i'}-${i}`)
    .onNode(node)
    .waitingSince(T0)
    .build();
  tree.addPod(pod);
  tree.markDirty(full ? undefined : node);
  const started = performance.now();
  const observed = await tree.reconcile();
  const ms = performance.now() - started;
  // The decision's apply runs in the background; left running, its work would be timed in the next round's pass
  // (and, since issue 43, hold that pass back from deciding). Unless --overlap, it is done before the next round, and
  // timed apart: the pass with its apply is the whole cost of the change, in a tree that acts inside its pass too.
  if (!OVERLAP) await tree.settle();
  return { ms, observed, withApply: performance.now() - started };
}

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const summary = (xs: number[]) => ({
  p50Ms: Number(percentile(sorted(xs), 0.5).toFixed(3)),
  p99Ms: Number(percentile(sorted(xs), 0.99).toFixed(3)),
});

mkdirSync(join(REPO_ROOT, 'scratch'), { recursive: true });
const dir = mkdtempSync(join(REPO_ROOT, 'scratch', 'bench-before-'));
try {
  execFileSync('sh', ['-c', `git -C "${REPO_ROOT}" archive ${BEFORE} src test/support | tar -x -C "${dir}"`]);
  const trees = { head: headTree(), before: await beforeTree(dir) };
  const series = () => ({
    incremental: [] as number[],
    full: [] as number[],
    applied: [] as number[],
    fullApplied: [] as number[],
    observed: 0,
  });
  const times = { head: series(), before: series() };
  for (const tree of [trees.head, trees.before]) {
    await tree.reconcile(); // the first pass writes every SandboxHealth; what follows measures changes
    await tree.reconcile();
  }
  // Interleaved, so both trees see the same machine state.
  for (let i = 0; i < ROUNDS; i++)
    for (const [name, tree] of Object.entries(trees) as [keyof typeof trees, Tree][]) {
      const a = await round(tree, i, false);
      const b = STREAM ? undefined : await round(tree, i, true);
      times[name].incremental.push(a.ms);
      times[name].applied.push(a.withApply);
      if (b) {
        times[name].full.push(b.ms);
        times[name].fullApplied.push(b.withApply);
      }
      times[name].observed = Math.max(times[name].observed, a.observed);
    }
  const figures = (t: (typeof times)['head']) => ({
    onePodChange: { ...summary(t.incremental), nodesObserved: t.observed },
    ...(STREAM ? {} : { fullPass: { ...summary(t.full), nodesObserved: NODES } }),
    ...(OVERLAP ? {} : { onePodChangeWithApply: summary(t.applied) }),
    ...(OVERLAP || STREAM ? {} : { fullPassWithApply: summary(t.fullApplied) }),
    ...(STREAM
      ? {}
      : {
          ratioP50: Number(
            (percentile(sorted(t.full), 0.5) / percentile(sorted(t.incremental), 0.5)).toFixed(1),
          ),
        }),
  });
  const ratioOf = (h: { p50Ms: number }, b: { p50Ms: number }) => Number((h.p50Ms / b.p50Ms).toFixed(2));
  const head = figures(times.head);
  const before = figures(times.before);
  const result = {
    date: new Date().toISOString(),
    nodes: NODES,
    pendingPods: NODES * PODS_PER_NODE + 2 * ROUNDS,
    rounds: ROUNDS,
    applies: OVERLAP ? 'overlapping the next round' : 'done between rounds',
    roundsAre: STREAM ? 'one-pod changes only' : 'a one-pod change, then a full pass',
    ...head,
    before: { commit: BEFORE, ...before },
    headOverBefore: {
      onePodChangeP50: ratioOf(head.onePodChange, before.onePodChange),
      ...(head.fullPass && before.fullPass ? { fullPassP50: ratioOf(head.fullPass, before.fullPass) } : {}),
      ...(head.onePodChangeWithApply && before.onePodChangeWithApply
        ? { onePodChangeWithApplyP50: ratioOf(head.onePodChangeWithApply, before.onePodChangeWithApply) }
        : {}),
      ...(head.fullPassWithApply && before.fullPassWithApply
        ? { fullPassWithApplyP50: ratioOf(head.fullPassWithApply, before.fullPassWithApply) }
        : {}),
    },
  };
  console.log(JSON.stringify(result, null, 2));
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', `reconcile-cost-${NODES}${STREAM ? '-stream' : ''}.json`),
    `${JSON.stringify(result, null, 2)}\n`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
