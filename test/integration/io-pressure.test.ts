import { expect } from 'chai';
import { join } from 'node:path';
import { createServer, type Server } from 'node:https';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { KubeletSummarySource } from '../../src/signals/kubelet-summary.js';
import { AgentProcess } from '../support/agent-process.js';
import { Cleanup, CLUSTER_DIR, createNodes, eventually, kubectl, uniqueName } from '../support/cluster.js';
import { DiskLoad, Monitoring } from '../support/monitoring.js';
import { useOperator } from '../support/operator-process.js';
import { applyPolicy, condition, getHealth, watchHealth } from '../support/resources.js';

const log = (msg: string) => {
  console.error(`      [io] ${msg}`);
};
const poolSelector = (pool: string) => ({ matchLabels: { 'sandbox.remediator.io/test-pool': pool } });

describe('IO-pressure evidence on the real cluster', function () {
  useOperator();
  const cleanup = new Cleanup();

  afterEach(() => cleanup.run());

  it('sees real stress-ng disk load through the agent and through Prometheus, and sees it end', async function () {
    this.timeout(420_000);
    const { pool, names } = await createNodes(cleanup, 2);
    const [agentNode, promNode] = names as [string, string];
    await kubectl(['label', 'node', promNode, 'io-source=prometheus']);
    const io = (extra: Record<string, unknown>) => ({
      sustainSeconds: 5,
      recoverySeconds: 10,
      staleAfterSeconds: 10,
      ...extra,
    });

    const monitoring = new Monitoring();
    cleanup.add(() => monitoring.stop());
    await monitoring.start(promNode);
    log(`node_exporter ${monitoring.nodeExporterUrl}, Prometheus ${monitoring.prometheusUrl}`);

    await applyPolicy(cleanup, uniqueName('it-agent'), {
      nodeSelector: {
        ...poolSelector(pool),
        matchExpressions: [{ key: 'io-source', operator: 'DoesNotExist' }],
      },
      ioPressure: io({
        thresholds: {
          psiSomeAvg10Percent: 20,
          psiFullAvg10Percent: 100,
          diskBusyPercent: 60,
          blockedProcesses: 10_000,
        },
      }),
    });
    await applyPolicy(cleanup, uniqueName('it-prom'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool, 'io-source': 'prometheus' } },
      ioPressure: io({
        source: 'prometheus',
        prometheus: { url: monitoring.prometheusUrl, nodeLabel: 'node', nodeLabelRegex: '^(.+)$' },
        thresholds: {
          psiSomeAvg10Percent: 10,
          psiFullAvg10Percent: 100,
          diskBusyPercent: 60,
          blockedProcesses: 10_000,
        },
      }),
    });

    const agent = new AgentProcess();
    cleanup.add(() => agent.stop());
    agent.start(agentNode, ['--interval-seconds=1', '--heartbeat-seconds=3']);

    const high = async (node: string) => condition((await getHealth(node))?.conditions, 'IoPressureHigh');
    for (const node of names) {
      await eventually(
        `a settled, low reading on ${node} before the load`,
        async () => (await high(node))?.reason === 'BelowThresholds',
        {
          timeoutMs: 120_000,
          intervalMs: 1000,
        },
      );
    }
    const baseline = await getHealth(promNode);

    const load = new DiskLoad();
    cleanup.add(() => load.stop());
    const loadStarted = Date.now();
    await load.start(90);
    log('stress-ng --io 4 --hdd 2 started (stops by itself after 90 s)');

    const agentHigh = await eventually(
      `IoPressureHigh=True on ${agentNode} (agent)`,
      async () => {
        const s = await getHealth(agentNode);
        return condition(s?.conditions, 'IoPressureHigh')?.status === 'True' ? s : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    const overSince = new Date(agentHigh.ioPressure!.since).getTime();
    log(
      `agent: over threshold ${((overSince - loadStarted) / 1000).toFixed(1)}s after the load started, IoPressureHigh ${((Date.now() - overSince) / 1000).toFixed(1)}s after that (sustainSeconds 5, interval 1 s); reading ${JSON.stringify({ psi: agentHigh.ioReading?.psiSomeAvg10Percent, busy: agentHigh.ioReading?.diskBusyPercent, d: agentHigh.ioReading?.dStateTasks?.length })}`,
    );
    const reading = agentHigh.ioReading!;
    expect(reading.source).to.equal('agent');
    expect(
      (reading.psiSomeAvg10Percent ?? 0) >= 20 || (reading.diskBusyPercent ?? 0) >= 60,
      JSON.stringify(reading),
    ).to.equal(true);
    expect(reading.dStateTasks).to.be.an('array');
    expect(agentHigh.ioPressure?.observation).to.equal('Over');
    expect((await kubectl(['describe', 'node', agentNode])).stdout).to.contain('IoPressureHigh');

    const promHigh = await eventually(
      `IoPressureHigh=True on ${promNode} (Prometheus)`,
      async () => {
        const s = await getHealth(promNode);
        return condition(s?.conditions, 'IoPressureHigh')?.status === 'True' ? s : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1000 },
    );
    log(
      `prometheus: IoPressureHigh ${((Date.now() - loadStarted) / 1000).toFixed(1)}s after the load started; reading ${JSON.stringify(promHigh.ioReading)}`,
    );
    expect(promHigh.ioReading?.source).to.equal('prometheus');
    expect(
      promHigh.ioReading?.psiSomeAvg10Percent ?? 0,
      'PSI from node_exporter rose with the load',
    ).to.be.greaterThan(baseline?.ioReading?.psiSomeAvg10Percent ?? 0);

    // Recovered is said on the pass that clears the condition, and the next pass below the thresholds says
    // BelowThresholds: every version of each node's SandboxHealth is watched, so that none passes through it unseen.
    const histories = await Promise.all(names.map((node) => watchHealth(cleanup, node)));
    await load.stop();
    const loadStopped = Date.now();
    log('stress-ng stopped');
    for (const [i, node] of names.entries()) {
      const history = histories[i]!;
      let last = '';
      const recovered = await eventually(
        `IoPressureHigh to clear on ${node}`,
        () => {
          const latest = history.seen.at(-1);
          const c = condition(latest?.conditions, 'IoPressureHigh');
          // Should it time out, what held it: the condition's words and the reading (another shard's disk load?).
          last = `${c?.reason}: ${c?.message}; reading ${JSON.stringify(latest?.ioReading)}`;
          return Promise.resolve(
            history.seen
              .map((s) => condition(s.conditions, 'IoPressureHigh'))
              .find((c) => c?.status === 'False' && c.reason === 'Recovered'),
          );
        },
        { timeoutMs: 180_000, intervalMs: 1000 },
      ).catch((err: unknown) => {
        throw new Error(`${err instanceof Error ? err.message : String(err)}; last seen ${last}`);
      });
      log(
        `${node}: recovered ${((Date.now() - loadStopped) / 1000).toFixed(1)}s after the load stopped (${recovered.message})`,
      );
    }
    expect((await kubectl(['describe', 'node', agentNode])).stdout).to.contain('IoPressureRecovered');
    expect(await agent.stop()).to.equal(0);
  });

  it('reads a node condition that someone else sets', async function () {
    this.timeout(60_000);
    const { pool, names } = await createNodes(cleanup, 1);
    await applyPolicy(cleanup, uniqueName('it-cond'), {
      nodeSelector: poolSelector(pool),
      ioPressure: {
        source: 'nodeCondition',
        nodeCondition: { type: 'IoPressure' },
        sustainSeconds: 0,
        recoverySeconds: 0,
      },
    });
    const setCondition = async (status: 'True' | 'False') => {
      const patch = {
        status: {
          conditions: [
            {
              type: 'IoPressure',
              status,
              reason: 'Test',
              message: 'set by the test',
              lastHeartbeatTime: new Date().toISOString(),
              lastTransitionTime: new Date().toISOString(),
            },
          ],
        },
      };
      const result = await kubectl([
        'patch',
        'node',
        names[0]!,
        '--subresource=status',
        '--type=strategic',
        '-p',
        JSON.stringify(patch),
      ]);
      expect(result.code, result.stderr).to.equal(0);
    };
    await eventually(
      'Unknown while no condition exists',
      async () => (await getHealth(names[0]!))?.ioPressure?.observation === 'Unknown',
    );
    await setCondition('True');
    const s = await eventually('IoPressureHigh from the condition', async () => {
      const h = await getHealth(names[0]!);
      return condition(h?.conditions, 'IoPressureHigh')?.status === 'True' ? h : undefined;
    });
    expect(s.ioReading).to.include({ source: 'nodeCondition', conditionTrue: true });
    await setCondition('False');
    await eventually(
      'IoPressureHigh to clear',
      async () => condition((await getHealth(names[0]!))?.conditions, 'IoPressureHigh')?.status === 'False',
    );
  });

  it('reports kubeletSummary readings as unknown when the apiserver will not proxy to the node, and reads a served Summary', async function () {
    this.timeout(60_000);
    const { pool, names } = await createNodes(cleanup, 1);
    await applyPolicy(cleanup, uniqueName('it-summary'), {
      nodeSelector: poolSelector(pool),
      ioPressure: { source: 'kubeletSummary' },
    });
    // The real path: the apiserver's node proxy. kwok nodes advertise 127.0.0.1, and the apiserver refuses to
    // proxy to loopback ("address not allowed"), so the reading must stay unknown: never zero.
    const unknown = await eventually('IoPressureHigh Unknown for the kwok node', async () => {
      const h = await getHealth(names[0]!);
      return condition(h?.conditions, 'IoPressureHigh')?.status === 'Unknown' ? h : undefined;
    });
    expect(unknown.ioReading).to.equal(undefined);

    // The same source against a kubelet-format Summary served over HTTPS on 127.0.0.1 (what the node proxy
    // would return from a real kubelet), through the same fetcher contract.
    const pki = join(CLUSTER_DIR, 'pki');
    const server: Server = createServer(
      { key: readFileSync(join(pki, 'apiserver.key')), cert: readFileSync(join(pki, 'apiserver.crt')) },
      (_req, res) => {
        res.end(
          JSON.stringify({
            node: {
              nodeName: names[0],
              io: {
                time: new Date().toISOString(),
                psi: {
                  some: { avg10: 61.5, avg60: 30, avg300: 9, total: 1 },
                  full: { avg10: 22, avg60: 9, avg300: 2, total: 1 },
                },
              },
            },
          }),
        );
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanup.add(() => new Promise((resolve) => server.close(resolve)));
    const port = (server.address() as AddressInfo).port;
    const ca = readFileSync(join(pki, 'ca.crt'));
    const { request } = await import('node:https');
    const fetchSummary = (node: string) =>
      new Promise<unknown>((resolve, reject) => {
        request({ host: '127.0.0.1', port, path: `/stats/summary?node=${node}`, ca }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => {
            resolve(JSON.parse(body));
          });
        })
          .on('error', reject)
          .end();
      });
    const source = new KubeletSummarySource(fetchSummary);
    await source.refresh([names[0]!]);
    expect(source.read(names[0]!)).to.include({
      source: 'kubeletSummary',
      psiSomeAvg10Percent: 61.5,
      psiFullAvg10Percent: 22,
    });
  });
});
