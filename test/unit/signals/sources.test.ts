import { ApiException } from '@kubernetes/client-node';
import { expect } from 'chai';
import { AgentSource, NodeConditionSource } from '../../../src/signals/cache-sources.js';
import {
  KubeletSummarySource,
  readingFromSummary,
  SUMMARY_CONCURRENCY,
} from '../../../src/signals/kubelet-summary.js';
import { PrometheusSource, QUERIES } from '../../../src/signals/prometheus.js';
import { T0 } from '../../support/builders.js';
import { aNode } from '../../support/memory-cluster.js';

const vector = (series: [Record<string, string>, number][]) => ({
  status: 'success',
  data: { resultType: 'vector', result: series.map(([metric, v]) => ({ metric, value: [0, String(v)] })) },
});

describe('PrometheusSource', () => {
  const settings = {
    url: 'http://prom.example:9090',
    nodeLabel: 'instance',
    nodeLabelRegex: '^([^:]+)(:\\d+)?$',
    queryTimeoutSeconds: 5,
  };

  it('maps each query to its field and each series to its node, keeping the worst device', async () => {
    const answers: Record<string, unknown> = {
      [QUERIES.psiSomeAvg10Percent]: vector([
        [{ instance: 'n1:9100' }, 42.123],
        [{ instance: 'n2:9100' }, 1],
      ]),
      [QUERIES.psiFullAvg10Percent]: vector([[{ instance: 'n1:9100' }, 5]]),
      [QUERIES.diskBusyPercent]: vector([
        [{ instance: 'n1:9100' }, 97],
        [{ instance: 'n1:9100', extra: 'x' }, 99.5],
      ]),
      [QUERIES.blockedProcesses]: vector([
        [{ instance: 'n1:9100' }, 6],
        [{ instance: 'unrelated:9100' }, 50],
      ]),
    };
    const asked: string[] = [];
    const fetchFn = ((url: URL) => {
      const q = url.searchParams.get('query') ?? '';
      asked.push(`${url.origin}${url.pathname}`);
      return Promise.resolve(new Response(JSON.stringify(answers[q]), { status: 200 }));
    }) as unknown as typeof fetch;
    const source = new PrometheusSource(settings, fetchFn, () => T0);
    await source.refresh(['n1', 'n2', 'n3']);
    expect(new Set(asked)).to.deep.equal(new Set(['http://prom.example:9090/api/v1/query']));
    expect(source.read('n1')).to.deep.equal({
      source: 'prometheus',
      observedTime: T0.toISOString(),
      psiSomeAvg10Percent: 42.1,
      psiFullAvg10Percent: 5,
      diskBusyPercent: 99.5,
      blockedProcesses: 6,
    });
    expect(source.read('n2')).to.deep.equal({
      source: 'prometheus',
      observedTime: T0.toISOString(),
      psiSomeAvg10Percent: 1,
    });
    expect(source.read('n3'), 'no series: unknown, not zero').to.equal(undefined);
    expect(source.read('unrelated')).to.equal(undefined);
  });

  it('fails a refresh with the server message, and the nodes it read before become unknown', async () => {
    let answer = new Response(JSON.stringify(vector([[{ instance: 'n1:9100' }, 90]])), { status: 200 });
    const fetchFn = (() => Promise.resolve(answer.clone())) as unknown as typeof fetch;
    const source = new PrometheusSource(settings, fetchFn, () => T0);
    await source.refresh(['n1']);
    expect(source.read('n1')?.psiSomeAvg10Percent).to.equal(90);
    answer = new Response(JSON.stringify({ status: 'error', error: 'parse error' }), { status: 400 });
    let message = '';
    await source.refresh(['n1']).catch((err: unknown) => (message = (err as Error).message));
    expect(message).to.match(/HTTP 400.*parse error/);
    expect(source.read('n1'), 'not the last reading, passed off as current').to.equal(undefined);
    expect(source.problem('n1')).to.deep.equal({
      reason: 'SourceUnavailable',
      message: 'Prometheus could not be read: Prometheus query failed (HTTP 400): parse error',
    });
  });

  it('drops the node of an impossible value, clamps a rate just over 100 %, and skips NaN', async () => {
    const answers: Record<string, unknown> = {
      [QUERIES.psiSomeAvg10Percent]: vector([
        [{ instance: 'n1:9100' }, -0.5],
        [{ instance: 'n2:9100' }, 103.26],
        [{ instance: 'n3:9100' }, 1e6],
      ]),
      [QUERIES.psiFullAvg10Percent]: vector([]),
      [QUERIES.diskBusyPercent]: vector([
        [{ instance: 'n1:9100' }, 5],
        [{ instance: 'n2:9100' }, NaN],
      ]),
      [QUERIES.blockedProcesses]: vector([
        [{ instance: 'n2:9100' }, 2],
        [{ instance: 'n4:9100' }, 1e300],
      ]),
    };
    const fetchFn = ((url: URL) =>
      Promise.resolve(
        new Response(JSON.stringify(answers[url.searchParams.get('query') ?? '']), { status: 200 }),
      )) as unknown as typeof fetch;
    const source = new PrometheusSource(settings, fetchFn, () => T0);
    await source.refresh(['n1', 'n2', 'n3', 'n4']);
    expect(source.read('n1'), 'a negative rate: not 0').to.equal(undefined);
    expect(source.problem('n1')?.message).to.equal(
      'Prometheus gave psiSomeAvg10Percent -0.5 for this node, which cannot be real',
    );
    expect(source.read('n2')).to.deep.equal({
      source: 'prometheus',
      observedTime: T0.toISOString(),
      psiSomeAvg10Percent: 100,
      blockedProcesses: 2,
    });
    expect(source.read('n3'), 'a counter glitch: not 100 %').to.equal(undefined);
    expect(source.read('n4'), 'more tasks than the kernel can have').to.equal(undefined);
    expect(source.problem('n4')?.reason).to.equal('SourceUnavailable');
  });
});

describe('KubeletSummarySource', () => {
  it('reads node.io.psi and leaves nodes without it, or failing, unknown', async () => {
    const summaries: Record<string, unknown> = {
      n1: {
        node: {
          io: {
            time: '2026-11-30T09:59:58Z',
            psi: { some: { avg10: 55.5, avg60: 20 }, full: { avg10: 12 } },
          },
        },
      },
      n2: { node: { cpu: {} } },
    };
    const errors: string[] = [];
    const source = new KubeletSummarySource(
      (node) =>
        node in summaries ? Promise.resolve(summaries[node]) : Promise.reject(new Error('proxy error')),
      () => T0,
      (node) => errors.push(node),
    );
    await source.refresh(['n1', 'n2', 'n3']);
    expect(source.read('n1')).to.deep.equal({
      source: 'kubeletSummary',
      observedTime: '2026-11-30T09:59:58.000Z',
      psiSomeAvg10Percent: 55.5,
      psiSomeAvg60Percent: 20,
      psiFullAvg10Percent: 12,
    });
    expect(source.read('n2')).to.equal(undefined);
    expect(source.read('n3')).to.equal(undefined);
    expect(errors).to.deep.equal(['n3']);
    expect(readingFromSummary({}, T0)).to.equal(undefined);
  });

  it('says what is wrong with a Summary it cannot read a number from', () => {
    const psi = (some: unknown, time?: unknown) => ({ node: { io: { time, psi: { some } } } });
    expect(() => readingFromSummary(psi({ avg10: '12' }), T0)).to.throw(
      'the Summary has an unexpected shape: node.io.psi.some.avg10: Invalid input: expected number, received string',
    );
    expect(() => readingFromSummary(psi({ avg10: 101 }), T0)).to.throw(
      /^the Summary's PSI cannot be real: psiSomeAvg10Percent: /,
    );
    expect(() => readingFromSummary(psi({ avg10: 1 }, 'yesterday'), T0)).to.throw(/node\.io\.time/);
    expect(readingFromSummary(psi({ avg10: 1 }, '2026-11-30T11:59:58+02:00'), T0)?.observedTime).to.equal(
      '2026-11-30T09:59:58.000Z',
    );
  });

  it('reports a failing node once per transition, names RBAC refusals, and says when it recovers', async () => {
    let answer: 'forbidden' | 'down' | 'ok' = 'forbidden';
    const forbidden = new ApiException(
      403,
      'Forbidden',
      '{"reason":"Forbidden","message":"nodes \\"n1\\" is forbidden: cannot get resource \\"nodes/proxy\\""}',
      {},
    );
    const events: string[] = [];
    const source = new KubeletSummarySource(
      () =>
        answer === 'ok'
          ? Promise.resolve({ node: { io: { psi: { some: { avg10: 1 } } } } })
          : Promise.reject(answer === 'forbidden' ? forbidden : new Error('connect ECONNREFUSED')),
      () => T0,
      (node) => events.push(`error ${node}`),
      (node) => events.push(`recovered ${node}`),
    );
    for (let i = 0; i < 3; i++) await source.refresh(['n1']);
    expect(source.problem('n1')).to.include({ reason: 'SourceForbidden' });
    expect(source.problem('n1')?.message).to.match(/nodes\/proxy/);
    answer = 'down';
    for (let i = 0; i < 3; i++) await source.refresh(['n1']);
    expect(source.problem('n1')).to.include({ reason: 'SourceUnavailable' });
    answer = 'ok';
    for (let i = 0; i < 3; i++) await source.refresh(['n1']);
    expect(source.problem('n1')).to.equal(undefined);
    expect(events).to.deep.equal(['error n1', 'error n1', 'recovered n1']);
  });

  it('keeps at most a bounded number of Summary fetches in flight, however many nodes', async () => {
    let inFlight = 0;
    let most = 0;
    const source = new KubeletSummarySource(
      async () => {
        most = Math.max(most, ++inFlight);
        await new Promise((resolve) => setTimeout(resolve, 2));
        inFlight--;
        return { node: { io: { psi: { some: { avg10: 1 } } } } };
      },
      () => T0,
    );
    const nodes = Array.from({ length: 100 }, (_, i) => `n${i}`);
    await source.refresh(nodes);
    expect(most).to.equal(SUMMARY_CONCURRENCY);
    expect(nodes.every((n) => source.read(n) !== undefined)).to.equal(true);
  });
});

describe('cache-fed sources', () => {
  it('reads the agent reading from SandboxHealth', () => {
    const ioReading = { source: 'agent', observedTime: T0.toISOString(), psiSomeAvg10Percent: 7 };
    const source = new AgentSource({
      health: (name) => (name === 'n1' ? { name, uid: 'u', status: { ioReading } } : undefined),
    });
    expect(source.read('n1')).to.equal(ioReading);
    expect(source.read('n2')).to.equal(undefined);
  });

  it('reads a node condition, unknown unless True or False', () => {
    const nodes = new Map([
      ['hot', { ...aNode('hot'), conditions: [{ type: 'IoPressure', status: 'True' }] }],
      ['cool', { ...aNode('cool'), conditions: [{ type: 'IoPressure', status: 'False' }] }],
      ['odd', { ...aNode('odd'), conditions: [{ type: 'IoPressure', status: 'Unknown' }] }],
    ]);
    const source = new NodeConditionSource({ node: (n) => nodes.get(n) }, 'IoPressure', () => T0);
    expect(source.read('hot')).to.deep.equal({
      source: 'nodeCondition',
      observedTime: T0.toISOString(),
      conditionTrue: true,
    });
    expect(source.read('cool')?.conditionTrue).to.equal(false);
    expect(source.read('odd')).to.equal(undefined);
    expect(source.read('none')).to.equal(undefined);
  });
});
