// A flood of FailedCreatePodSandBox Events on the real cluster (kubelet's wording, for pods that exist and pods
// that never did, in one namespace) while the operator runs: its memory stays bounded and it still detects a real
// incident in the middle of it.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CoreV1Event } from '@kubernetes/client-node';
import { api, Cleanup, createNamespace, createNodes, eventually, uniqueName } from '../support/cluster.js';
import { useOperator } from '../support/operator-process.js';
import { applyPolicy, condition, getHealth } from '../support/resources.js';
import { createSpreadDeployment, startIncident } from '../support/workloads.js';

const EVENTS = Number(process.env.FLOOD_EVENTS ?? 50_000);
const log = (msg: string) => {
  console.error(`      [event-flood] ${msg}`);
};

/** The operator's resident set, from /proc (the process's own view, not a metric it reports about itself). */
const rssMiB = (pid: number) => {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : NaN;
};

describe('a flood of FailedCreatePodSandBox Events', function () {
  const operator = useOperator();
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());

  it(`keeps the operator's memory bounded through ${EVENTS} Events and still detects a real incident in the middle of it`, async function () {
    this.timeout(900_000);
    const { pool, names } = await createNodes(cleanup, 3);
    await applyPolicy(cleanup, uniqueName('it-flood'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 3 },
      safety: { dryRun: true },
    });
    const flood = await createNamespace(cleanup, 'flood');
    const pid = operator.pid!;
    await sleep(3000);
    const before = rssMiB(pid);
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssMiB(pid));
    }, 500);
    cleanup.add(() => {
      clearInterval(sampler);
      return Promise.resolve();
    });

    // Kubelet's messages for 2,000 pods that never existed, spread over the pool's nodes and a node nobody has.
    const { core } = api();
    const started = Date.now();
    let sent = 0;
    let incidentAt = 0;
    const body = (i: number): CoreV1Event => {
      const pod = `ghost-${i % 2000}`;
      const node = i % 7 === 0 ? 'no-such-node' : names[i % names.length]!;
      const now = new Date();
      return {
        metadata: { name: `${pod}.${i.toString(16)}`, namespace: flood },
        involvedObject: {
          kind: 'Pod',
          namespace: flood,
          name: pod,
          uid: `00000000-0000-0000-0000-${String(i % 2000).padStart(12, '0')}`,
        },
        reason: 'FailedCreatePodSandBox',
        message: `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "${pod}_${flood}_${i}_0": name "${pod}_${flood}_${i}_0" is reserved for "${i.toString(16).padStart(64, '0')}"`,
        source: { component: 'kubelet', host: node },
        type: 'Warning',
        count: 1,
        firstTimestamp: now,
        lastTimestamp: now,
      };
    };
    const namespace = await createNamespace(cleanup);
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (sent < EVENTS) {
          const i = sent++;
          await core.createNamespacedEvent({ namespace: flood, body: body(i) }).catch(() => undefined);
          if (i % 10_000 === 0)
            log(
              `${i} Events sent in ${Math.round((Date.now() - started) / 1000)} s; RSS ${rssMiB(pid).toFixed(1)} MiB`,
            );
          // Halfway through, a real incident on the first node.
          if (i === Math.floor(EVENTS / 2)) {
            incidentAt = Date.now();
            await startIncident(cleanup, names[0]!);
            await createSpreadDeployment(cleanup, namespace, 'web', pool, 6);
          }
        }
      }),
    );
    const floodSeconds = (Date.now() - started) / 1000;
    log(`${EVENTS} Events in ${floodSeconds.toFixed(0)} s`);

    const detected = await eventually(
      'the real incident detected',
      async () => {
        const h = await getHealth(names[0]!);
        return condition(h?.conditions, 'SandboxCreationDegraded')?.status === 'True'
          ? Date.now()
          : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    log(
      `incident detected ${((detected - incidentAt) / 1000).toFixed(1)} s after it started, during the flood`,
    );
    const ghosts = await getHealth(names[1]!);
    expect(
      condition(ghosts?.conditions, 'SandboxCreationDegraded')?.status,
      'Events for pods that do not exist make no node degraded',
    ).to.not.equal('True');

    await sleep(5000);
    clearInterval(sampler);
    const after = rssMiB(pid);
    log(
      `operator RSS: ${before.toFixed(1)} MiB before, peak ${peak.toFixed(1)} MiB, ${after.toFixed(1)} MiB after`,
    );
    expect(operator.isRunning()).to.equal(true);
    // Bounded: growth well under what keeping the flood would cost (50,000 Events are ~50 MB of JSON).
    expect(peak - before, 'RSS growth through the flood (MiB)').to.be.below(150);
  });
});
