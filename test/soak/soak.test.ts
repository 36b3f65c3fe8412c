// `make soak` (not in CI): SOAK_MINUTES (60) of incidents starting and stopping on random nodes of a kwok pool while
// the operator is restarted at random (kill -9 or SIGTERM), with rollouts and paced pod starts going on. At the
// end nothing is cordoned, stamped, paused or gated, no node was cordoned twice without an undo between (from the
// audit log), and the operator's RSS trend is flat.
import type { V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { AgentProcess } from '../support/agent-process.js';
import { alternates, maxEvictionsInAMinute, operatorWrites, settings } from '../support/audit.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { freePort } from '../support/monitoring.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  applyCrds,
  applyRbac,
  applyWebhookConfig,
  deleteWebhookConfig,
  startAsServiceAccount,
  type OperatorProcess,
} from '../support/operator-process.js';
import { FAST_IO, ProcRoot } from '../support/proc-root.js';
import { HeapProbe } from '../support/heap.js';
import { applyPolicy } from '../support/resources.js';
import { createRolloutDeployment, pausedBy, readDeployment, restartRollout } from '../support/rollouts.js';
import { createSpreadDeployment, readNode, startIncident, stampsOf } from '../support/workloads.js';

const MINUTES = Number(process.env.SOAK_MINUTES ?? 60);
const SEED = Number(process.env.SOAK_SEED ?? Date.now() % 1_000_000);
const NODES = 8;
/**
 * Memory is judged per process after a warm-up (SOAK_WARMUP_MINUTES, 15): RSS rises for about 14 minutes as the heap,
 * JIT code and allocator arenas settle (ADR 0013), then levels off. A process counts when it lived at least ten minutes
 * past that.
 */
const WARMUP = Number(process.env.SOAK_WARMUP_MINUTES ?? 15);
/**
 * Restarts come at random SOAK_RESTART_MINUTES (3,8) apart, but none in the last SOAK_SETTLE_MINUTES (35): the last
 * process lives long enough for its memory to be judged after its warm-up.
 */
const SETTLE = Number(process.env.SOAK_SETTLE_MINUTES ?? 35);
/**
 * A directory for heap snapshots of each operator process at the end of its warm-up and just before it stops, to
 * diff what the judged window kept. A snapshot costs the process about 200 MiB of RSS that it keeps, so with
 * snapshots on only the heap is judged.
 */
const SNAPSHOTS = process.env.SOAK_SNAPSHOTS;
const GATE = 'sandbox.remediator.io/paced';
const log = (msg: string) => {
  console.error(`      [soak ${new Date().toISOString().slice(11, 19)}] ${msg}`);
};

/** A small seeded generator (mulberry32), so a failing soak can be replayed with SOAK_SEED. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const rssMiB = (pid: number) => {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
};

/** Least-squares slope of y over x. */
function slope(points: [number, number][]): number {
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0);
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return den === 0 ? 0 : num / den;
}

describe('soak: incidents on random nodes while the operator restarts at random', function () {
  const cleanup = new Cleanup();
  let operator: OperatorProcess | undefined;
  let closeProbe: (() => void) | undefined;
  let dir = '';
  after(async function () {
    this.timeout(300_000);
    closeProbe?.(); // an attached inspector keeps a stopping Node.js process alive
    await operator?.stop();
    await cleanup.run();
    if (dir) await rm(dir, { recursive: true, force: true });
    await deleteWebhookConfig();
  });

  it(`leaves nothing behind after ${MINUTES} min, never cordons twice without an undo, and keeps the heap (and, without snapshots, RSS) flat`, async function () {
    this.timeout((MINUTES + 20) * 60_000);
    // The last process must live through its warm-up and ten judged minutes (with two to spare for its start and
    // the once-a-minute heap samples), or no memory verdict is possible.
    if (!(MINUTES >= SETTLE && SETTLE >= WARMUP + 12))
      throw new Error(
        `SOAK_MINUTES (${MINUTES}) >= SOAK_SETTLE_MINUTES (${SETTLE}) >= SOAK_WARMUP_MINUTES (${WARMUP}) + 12 is needed for a memory verdict`,
      );
    const rand = random(SEED);
    log(`seed ${SEED} (SOAK_SEED=${SEED} replays the schedule), ${MINUTES} min`);
    await applyCrds();
    await applyRbac();
    await applyWebhookConfig();
    dir = await mkdtemp(join(tmpdir(), 'soak-'));
    const webhookPort = await freePort();
    // As the Deployment runs it (its ServiceAccount): the audit log then records its Node and Deployment patches
    // with their bodies.
    // The compiled CLI, as the image runs it, with its inspector open so that the heap can be read after a full
    // collection.
    let started = 0;
    const startedAt = new Map<number, number>();
    const start = async () => {
      const op = await startAsServiceAccount(
        dir,
        `soak-${started++}`,
        [`--webhook-bind-address=127.0.0.1:${webhookPort}`],
        { built: true, nodeArgs: ['--inspect=127.0.0.1:0'] },
      );
      startedAt.set(op.pid!, Date.now());
      return op;
    };
    operator = await start();
    const since = new Date();

    const namespace = await createNamespace(cleanup, 'soak');
    await kubectl(['label', 'namespace', namespace, 'pacing=on']);
    const { pool, names } = await createNodes(cleanup, NODES);
    await applyPolicy(cleanup, uniqueName('soak'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: FAST_IO,
      safety: { maxUnhealthyNodes: 3, cooldownSeconds: 10, maxEvictionsPerMinute: 10 },
      remediation: {
        throttleRollouts: {
          maxConcurrentRollouts: 2,
          pacePodStarts: {
            maxPodStartsPerMinute: 20,
            namespaceSelector: { matchLabels: { pacing: 'on' } },
            maxGateSeconds: 120,
          },
        },
      },
    });
    const procs = new Map<string, ProcRoot>();
    for (const name of names) {
      const proc = new ProcRoot();
      const agent = new AgentProcess();
      cleanup.add(() => proc.remove());
      cleanup.add(() => agent.stop());
      agent.start(name, [
        `--proc-root=${await proc.create()}`,
        '--interval-seconds=1',
        '--heartbeat-seconds=3',
      ]);
      procs.set(name, proc);
    }
    await createSpreadDeployment(cleanup, namespace, 'web', pool, NODES * 2);
    await createRolloutDeployment(cleanup, namespace, 'roll', pool);

    const sick = new Set<string>();
    const samples: { pid: number; at: number; rss: number }[] = [];
    const heaps: { pid: number; at: number; mib: number }[] = [];
    const soakStart = Date.now();
    const end = soakStart + MINUTES * 60_000;
    const [soonest, latest] = (process.env.SOAK_RESTART_MINUTES ?? '3,8').split(',').map(Number) as [
      number,
      number,
    ];
    if (!(soonest > 0 && latest >= soonest))
      throw new Error(
        `SOAK_RESTART_MINUTES must be two numbers, soonest,latest (got ${process.env.SOAK_RESTART_MINUTES})`,
      );
    const lastRestart = end - SETTLE * 60_000;
    const restartDelay = () => (soonest + rand() * (latest - soonest)) * 60_000;
    let nextRestart = soakStart + restartDelay();
    let nextRollout = soakStart + 60_000;
    let nextScale = soakStart + 30_000;
    let restarts = 0;
    let incidents = 0;
    const sampler = setInterval(() => {
      const pid = operator?.pid;
      const rss = pid === undefined ? undefined : rssMiB(pid);
      if (pid !== undefined && rss !== undefined) samples.push({ pid, at: Date.now(), rss });
    }, 10_000);
    cleanup.add(() => {
      clearInterval(sampler);
      return Promise.resolve();
    });
    // The heap after a full collection, once a minute, through one inspector connection per process; one probe
    // call at a time (a snapshot and a sample must not interleave). The collections also keep V8 from letting
    // garbage pile up between samples, so RSS measures what is kept (a leak, JavaScript or native), not how lazily V8
    // collects.
    let probe: { pid: number; probe: HeapProbe; early: boolean } | undefined;
    closeProbe = () => {
      probe?.probe.close();
    };
    let probing: Promise<unknown> = Promise.resolve();
    const withProbe = (fn: (p: NonNullable<typeof probe>) => Promise<void>) => {
      const op = operator;
      const pid = op?.pid;
      const run = async () => {
        if (!op?.isRunning() || pid === undefined || op.inspector === undefined) return;
        if (heapState.hold && probe?.pid !== pid) return; // no new session while the operator is being stopped
        try {
          if (probe?.pid !== pid) {
            probe?.probe.close();
            probe = { pid, probe: await HeapProbe.connect(op.inspector), early: false };
          }
          await fn(probe);
        } catch (err) {
          log(`heap probe of ${pid}: ${(err as Error).message}`);
        }
      };
      probing = probing.then(run, run);
      return probing;
    };
    // Before the operator is stopped: with an inspector session attached, Node.js does not exit.
    const disconnect = () =>
      withProbe((p) => {
        p.probe.close();
        probe = undefined;
        return Promise.resolve();
      });
    const snapshot = (p: NonNullable<typeof probe>, when: string) => {
      if (!SNAPSHOTS) return Promise.resolve();
      const path = join(SNAPSHOTS, `soak-${SEED}-${p.pid}-${when}.heapsnapshot`);
      log(`heap snapshot: ${path}`);
      return p.probe.snapshot(path);
    };
    const heapState: { sampling: boolean; hold: boolean } = { sampling: true, hold: false };
    const pause = async () => {
      for (let i = 0; i < 12; i++) {
        if (!heapState.sampling) return;
        await sleep(5000);
      }
    };
    const heapSampler = (async () => {
      while (heapState.sampling) {
        await withProbe(async (p) => {
          heaps.push({ pid: p.pid, at: Date.now(), mib: (await p.probe.usedAfterGc()) / 2 ** 20 });
          if (!p.early && Date.now() - (startedAt.get(p.pid) ?? 0) >= WARMUP * 60_000) {
            p.early = true;
            await snapshot(p, 'early');
          }
        });
        await pause();
      }
    })();
    cleanup.add(async () => {
      heapState.sampling = false;
      await heapSampler;
      probe?.probe.close();
    });
    while (Date.now() < end) {
      const now = Date.now();
      if (now >= nextRestart && now <= lastRestart) {
        const hard = rand() < 0.5;
        log(`restarting the operator (${hard ? 'kill -9' : 'SIGTERM'}); ${sick.size} node(s) in an incident`);
        heapState.hold = true;
        await withProbe((p) => snapshot(p, 'late'));
        await disconnect();
        if (hard) {
          operator.kill();
          await operator.exited;
        } else {
          const code = await operator.stop();
          expect(code, 'exit 0 on SIGTERM').to.equal(0);
        }
        operator = await start();
        heapState.hold = false;
        restarts++;
        nextRestart = now + restartDelay();
      }
      if (now >= nextRollout) {
        await restartRollout(namespace, 'roll');
        nextRollout = now + (1 + rand() * 2) * 60_000;
      }
      if (now >= nextScale) {
        // New pods in the paced namespace: gated under pressure, released after.
        const replicas = NODES * 2 + Math.floor(rand() * NODES);
        await kubectl(['scale', 'deployment/web', '-n', namespace, `--replicas=${replicas}`]);
        nextScale = now + (20 + rand() * 40) * 1000;
      }
      const node = names[Math.floor(rand() * names.length)]!;
      if (sick.has(node)) {
        await hack('incident', ['stop', '--node', node]);
        await procs.get(node)!.setPressure('idle');
        sick.delete(node);
      } else if (sick.size < 3) {
        await startIncident(cleanup, node, ['--max-duration-seconds', String(MINUTES * 60 + 600)]);
        await procs.get(node)!.setPressure('load');
        sick.add(node);
        incidents++;
      }
      await sleep((10 + rand() * 30) * 1000);
    }
    log(`${incidents} incidents, ${restarts} operator restarts; ending every incident`);
    heapState.sampling = false;
    await heapSampler;
    await withProbe((p) => snapshot(p, 'late'));
    await disconnect();
    for (const node of sick) {
      await hack('incident', ['stop', '--node', node]);
      await procs.get(node)!.setPressure('idle');
    }

    await eventually(
      'nothing cordoned, stamped, paused or gated',
      async () => {
        for (const name of names) {
          const n = await readNode(name);
          if (n.spec?.unschedulable || Object.keys(stampsOf(n)).length > 0) return false;
        }
        for (const name of ['web', 'roll']) {
          const d = await readDeployment(namespace, name);
          if (d.spec?.paused || pausedBy(d)) return false;
        }
        const pods = (await api().core.listNamespacedPod({ namespace })).items;
        return !pods.some((p: V1Pod) => (p.spec?.schedulingGates ?? []).some((g) => g.name === GATE));
      },
      { timeoutMs: 300_000, intervalMs: 2000 },
    );
    clearInterval(sampler);
    const writes = await operatorWrites(since);
    const cordons = settings(writes, 'nodes', 'unschedulable');
    const pauses = settings(writes, 'deployments', 'paused');
    log(`cordons per node: ${JSON.stringify(cordons)}; pauses: ${JSON.stringify(pauses)}`);
    expect(Object.keys(cordons).length, 'nodes cordoned during the soak').to.be.greaterThan(0);
    for (const [name, changes] of Object.entries({ ...cordons, ...pauses }))
      expect(alternates(changes), `${name}: never set twice without an undo between`).to.equal(true);
    const most = maxEvictionsInAMinute(writes);
    log(`at most ${most} evictions in any minute`);
    expect(most, 'maxEvictionsPerMinute (10)').to.be.at.most(10);

    heapState.sampling = false;
    await heapSampler;
    // RSS and the heap after a full collection: the slope within each process's life after its warm-up, in MiB per
    // hour. Both are logged before either is judged.
    const judged = (list: { pid: number; at: number; mib: number }[]) =>
      list.filter((s) => s.at - (startedAt.get(s.pid) ?? Infinity) >= WARMUP * 60_000);
    const heap = trend('heap after GC', judged(heaps));
    expect(heap, 'heap after a full GC, MiB per hour').to.be.below(5);
    if (SNAPSHOTS) {
      log('RSS not judged: heap snapshots were taken (each keeps about 200 MiB)');
      return;
    }
    const rss = trend('RSS', judged(samples.map((s) => ({ pid: s.pid, at: s.at, mib: s.rss }))));
    expect(rss, 'RSS trend, MiB per hour').to.be.below(20);
  });
});

/**
 * The lifetime-weighted least-squares slope (MiB per hour) of each process's samples, for processes with ten minutes
 * of them; logged with the range.
 */
function trend(what: string, samples: { pid: number; at: number; mib: number }[]): number {
  const byPid = new Map<number, [number, number][]>();
  for (const s of samples) {
    const list = byPid.get(s.pid) ?? [];
    list.push([s.at / 3_600_000, s.mib]);
    byPid.set(s.pid, list);
  }
  const slopes = [...byPid.values()]
    .filter((points) => points.length >= 2 && points.at(-1)![0] - points[0]![0] >= 10 / 60)
    .map((points) => ({
      slope: slope(points),
      minutes: (points.at(-1)![0] - points[0]![0]) * 60,
      from: points[0]![1],
      to: points.at(-1)![1],
    }));
  const all = samples.map((s) => s.mib);
  log(
    `${what}: ${Math.min(...all).toFixed(1)}..${Math.max(...all).toFixed(1)} MiB over ${samples.length} samples; per process: ${slopes.map((s) => `${s.from.toFixed(1)} -> ${s.to.toFixed(1)} MiB, ${s.slope.toFixed(1)} MiB/h over ${s.minutes.toFixed(0)} min`).join('; ')}`,
  );
  expect(slopes.length, `${what}: processes that lived long enough to judge`).to.be.greaterThan(0);
  const weighted =
    slopes.reduce((s, x) => s + x.slope * x.minutes, 0) / slopes.reduce((s, x) => s + x.minutes, 0);
  log(`${what} trend: ${weighted.toFixed(1)} MiB/h (weighted by lifetime)`);
  return weighted;
}
