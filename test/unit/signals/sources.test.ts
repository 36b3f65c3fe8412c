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

  it('fails a refresh with the server message, leaving readings as they were', async () => {
    const fetchFn = (() =>
      Promise.resolve(
        new Response(JSON.stringify({ status: 'error', error: 'parse error' }), { status: 400 }),
      )) as unknown as typeof fetch;
    const source = new PrometheusSource(settings, fetchFn, () => T0);
    let message = '';
    await source.refresh(['n1']).catch((err: unknown) => (message = (err as Error).message));
    expect(message).to.match(/HTTP 400.*parse error/);
    expect(source.read('n1')).to.equal(undefined);
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
