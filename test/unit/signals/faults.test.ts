// The Prometheus and kubelet Summary sources against a real server on 127.0.0.1 that answers with garbage, with
// the wrong shape, with 50 MB, slowly, or not at all. Whatever it does, the node's reading is unknown (never a
// number made up from the garbage, never the last good reading passed off as current) within the configured
// timeout, memory does not grow with the size of the answer, and the source reads again once the server is sane.
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IoReadingStatus } from '../../../src/api/v1alpha1/index.js';
import { loadKubeConfig } from '../../../src/kube/client.js';
import { kubeletSummaryFetcher } from '../../../src/kube/kubelet-summary.js';
import { KubeletSummarySource } from '../../../src/signals/kubelet-summary.js';
import { MAX_RESPONSE_BYTES } from '../../../src/runtime/bounded-read.js';
import { PrometheusSource, QUERIES } from '../../../src/signals/prometheus.js';
import type { SourceProblem } from '../../../src/signals/types.js';
import { generateServingCert, type ServingCert } from '../../../src/webhook/certs.js';
import {
  head,
  MB,
  measureMemory,
  MisbehavingServer,
  respond,
  streamBody,
  trickle,
  type Behaviour,
} from './misbehaving-server.js';
import { writeTokenKubeconfigFor } from '../../support/tls-apiserver.js';

const TIMEOUT_MS = 1000;
/** Generous: these machines are noisy. Without a timeout that covers the body, the slow cases never end. */
const WITHIN_MS = 5000;
const NODE = 'n1';

/** One source under test, bound to a server, with what a sane answer and a huge one look like for it. */
interface Subject {
  refresh(): Promise<void>;
  read(): IoReadingStatus | undefined;
  problem(): SourceProblem | undefined;
  /** A sane, complete answer to `asked` whose PSI (some, avg10) for the node is `psi`. */
  answer(asked: { url: URL }, psi: number): string;
  /** A valid answer of any size: the prefix, the filler repeated, the suffix; psi 99. */
  huge: { prefix: string; filler: string; suffix: string };
}

interface Target {
  name: string;
  /** Where the source sends its requests (the kubelet's goes through the apiserver's node proxy). */
  path: RegExp;
  build(server: MisbehavingServer, dir: string, maxBytes?: number): Subject;
  /** Well-formed JSON of the wrong shape or with values nothing real could send. */
  wrongShapes: { name: string; body: string; saysWhy?: false }[];
}

const promVector = (value: unknown, metric: unknown = { instance: `${NODE}:9100` }) =>
  JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric, value }] } });

const prometheus: Target = {
  name: 'PrometheusSource',
  path: /^\/api\/v1\/query\?/,
  build(server, _dir, maxBytes) {
    const source = new PrometheusSource(
      {
        url: server.url,
        nodeLabel: 'instance',
        nodeLabelRegex: '^([^:]+)(:\\d+)?$',
        queryTimeoutSeconds: TIMEOUT_MS / 1000,
      },
      fetch,
      () => new Date(),
      ...(maxBytes === undefined ? [] : [maxBytes]),
    );
    const series = `{"metric":{"instance":"other:9100","job":"node-exporter"},"value":[1,"1"]},`;
    return {
      refresh: () => source.refresh([NODE]),
      read: () => source.read(NODE),
      problem: () => source.problem(NODE),
      answer: (asked, psi) =>
        promVector([
          1,
          String(asked.url.searchParams.get('query') === QUERIES.psiSomeAvg10Percent ? psi : 1),
        ]),
      huge: {
        prefix: '{"status":"success","data":{"resultType":"vector","result":[',
        filler: series,
        suffix: `{"metric":{"instance":"${NODE}:9100"},"value":[1,"99"]}]}}`,
      },
    };
  },
  wrongShapes: [
    {
      name: 'result is a string',
      body: '{"status":"success","data":{"resultType":"vector","result":"n1 99"}}',
    },
    { name: 'a value is a number, not a string', body: promVector([1, 99]) },
    { name: 'a value is a word', body: promVector([1, 'ninety']) },
    { name: 'a value is an empty string', body: promVector([1, '']) },
    { name: 'a value is null', body: promVector([1, null]) },
    { name: 'a value is negative', body: promVector([1, '-5']) },
    { name: 'a value is huge', body: promVector([1, '1e300']) },
    { name: 'a value overflows to Infinity', body: promVector([1, '1e999']), saysWhy: false },
    { name: 'a value is NaN', body: promVector([1, 'NaN']), saysWhy: false },
    { name: 'the sample is a bare string', body: promVector('99') },
    { name: 'a series is null', body: '{"status":"success","data":{"resultType":"vector","result":[null]}}' },
    { name: 'a metric is null', body: promVector([1, '99'], null) },
    { name: 'a label is a number', body: promVector([1, '99'], { instance: 1 }) },
    { name: 'data is null', body: '{"status":"success","data":null}' },
    {
      name: 'a matrix, not a vector',
      body: JSON.stringify({
        status: 'success',
        data: {
          resultType: 'matrix',
          result: [{ metric: { instance: `${NODE}:9100` }, values: [[1, '99']] }],
        },
      }),
    },
    {
      name: 'no status',
      body: JSON.stringify({ data: { resultType: 'vector', result: [] } }),
    },
    { name: 'a JSON string', body: '"success"' },
  ],
};

const summary = (io: unknown) => JSON.stringify({ node: { nodeName: NODE, io }, pods: [] });

const kubeletSummary: Target = {
  name: 'KubeletSummarySource',
  // client-node escapes the slash in the proxied path; the apiserver takes either.
  path: new RegExp(`^/api/v1/nodes/${NODE}/proxy/stats(/|%2F)summary$`),
  build(server, dir, maxBytes) {
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'c', cluster: { server: server.url, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user: { token: 't' } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
    );
    // The real fetcher, through client-node, with this server standing in for the apiserver's node proxy: the
    // apiserver refuses to proxy to a loopback node (ADR 0007).
    const fetchSummary = kubeletSummaryFetcher(
      loadKubeConfig(kubeconfig, { requestTimeoutMs: 60_000 }),
      TIMEOUT_MS,
      ...(maxBytes === undefined ? [] : [maxBytes]),
    );
    const source = new KubeletSummarySource(fetchSummary);
    const pod = `{"podRef":{"name":"p","namespace":"ns","uid":"u"},"containers":[{"name":"c","cpu":{"usageNanoCores":1}}]},`;
    return {
      refresh: () => source.refresh([NODE]),
      read: () => source.read(NODE),
      problem: () => source.problem(NODE),
      answer: (_asked, psi) =>
        summary({
          time: new Date().toISOString(),
          psi: { some: { avg10: psi, avg60: 1 }, full: { avg10: 1 } },
        }),
      huge: {
        prefix: `{"node":{"nodeName":"${NODE}","io":{"psi":{"some":{"avg10":99}}}},"pods":[`,
        filler: pod,
        suffix: '{}]}',
      },
    };
  },
  wrongShapes: [
    { name: 'avg10 is a string', body: summary({ psi: { some: { avg10: '99' } } }) },
    { name: 'avg10 is negative', body: summary({ psi: { some: { avg10: -5 } } }) },
    { name: 'avg10 is over 100 %', body: summary({ psi: { some: { avg10: 150 } } }) },
    { name: 'avg10 is huge', body: summary({ psi: { some: { avg10: 1e300 } } }) },
    { name: 'avg10 overflows to Infinity', body: '{"node":{"io":{"psi":{"some":{"avg10":1e999}}}}}' },
    { name: 'avg10 is null', body: summary({ psi: { some: { avg10: null } } }) },
    {
      name: 'avg60 is garbage beside a good avg10',
      body: summary({ psi: { some: { avg10: 9, avg60: 'x' } } }),
    },
    { name: 'full.avg10 is negative', body: summary({ psi: { some: { avg10: 9 }, full: { avg10: -1 } } }) },
    { name: 'the time is not a time', body: summary({ time: 'yesterday', psi: { some: { avg10: 9 } } }) },
    { name: 'the time is a number', body: summary({ time: 5, psi: { some: { avg10: 9 } } }) },
    { name: 'psi is null', body: summary({ psi: null }) },
    { name: 'io is an array', body: summary([9]) },
    { name: 'node is a string', body: '{"node":"n1"}' },
    { name: 'the answer is an array', body: '[{"node":{}}]' },
    { name: 'a JSON string', body: '"hello"' },
    { name: 'no node.io: an older kubelet', body: '{"node":{"nodeName":"n1"},"pods":[]}', saysWhy: false },
  ],
};

const GARBAGE = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 131 + 7) % 256));

/**
 * Faults of the transport, the same for every source. `slow`: only the timeout can end it; `fast`: the client can
 * tell at once, and must not sit out the timeout (client-node's node-fetch did, for these two).
 */
const faults: {
  name: string;
  slow?: true;
  fast?: true;
  behaviour: (subject: Subject) => Behaviour;
}[] = [
  {
    name: 'garbage bytes',
    behaviour: () => (_a, socket) => {
      respond(socket, 200, GARBAGE);
    },
  },
  {
    name: 'an empty body',
    behaviour: () => (_a, socket) => {
      respond(socket, 200, '');
    },
  },
  {
    name: 'a body cut short (Content-Length honest)',
    behaviour: (s) => (asked, socket) => {
      respond(socket, 200, s.answer(asked, 90).slice(0, 20));
    },
  },
  {
    name: 'a body cut short (connection closed before Content-Length)',
    fast: true,
    behaviour: (s) => (asked, socket) => {
      const body = s.answer(asked, 90);
      socket.end(head(200, { 'Content-Length': body.length }) + body.slice(0, 20));
    },
  },
  {
    name: 'Content-Length shorter than the body',
    behaviour: (s) => (asked, socket) => {
      const body = s.answer(asked, 90);
      socket.end(head(200, { 'Content-Length': body.length - 3 }) + body);
    },
  },
  {
    name: 'Content-Length longer than the body, then silence',
    slow: true,
    behaviour: (s) => (asked, socket) => {
      const body = s.answer(asked, 90);
      socket.write(head(200, { 'Content-Length': body.length + 1000 }) + body);
    },
  },
  {
    name: 'Content-Length of 50 MB, then silence',
    slow: true,
    behaviour: () => (_a, socket) => {
      socket.write(head(200, { 'Content-Length': 50 * MB }) + '{"status":"success",');
    },
  },
  {
    name: 'a sane body with no Content-Length, and the connection never closed',
    slow: true,
    behaviour: (s) => (asked, socket) => {
      socket.write(head(200) + s.answer(asked, 90));
    },
  },
  {
    name: 'headers, then silence',
    slow: true,
    behaviour: () => (_a, socket) => {
      socket.write(head(200));
    },
  },
  { name: 'no answer at all', slow: true, behaviour: () => () => undefined },
  {
    name: 'a sane body, one byte a second',
    slow: true,
    behaviour: (s) => (asked, socket, server) => {
      trickle(socket, server, s.answer(asked, 90));
    },
  },
  {
    name: 'HTTP 500 with a JSON error',
    behaviour: () => (_a, socket) => {
      respond(socket, 500, '{"status":"error","error":"query timed out"}');
    },
  },
  {
    name: 'HTTP 500 with a sane body',
    behaviour: (s) => (asked, socket) => {
      respond(socket, 500, s.answer(asked, 90));
    },
  },
  {
    name: 'HTTP 404 with HTML',
    behaviour: () => (_a, socket) => {
      respond(socket, 404, '<html>not here</html>', { 'Content-Type': 'text/html' });
    },
  },
  {
    name: 'HTTP 302 to a login page',
    behaviour: () => (asked, socket) => {
      if (asked.path.startsWith('/login'))
        respond(socket, 200, '<html>sign in</html>', { 'Content-Type': 'text/html' });
      else respond(socket, 302, '', { Location: '/login' });
    },
  },
  {
    name: 'HTTP 302 to itself, for ever',
    behaviour: () => (asked, socket) => {
      respond(socket, 302, '', { Location: asked.path });
    },
  },
  {
    name: 'HTTP 302 with no Location',
    behaviour: () => (_a, socket) => {
      respond(socket, 302, '');
    },
  },
  {
    name: 'a 50 MB body',
    behaviour: (s) => (_a, socket, server) => streamBody(socket, server, { ...s.huge, total: 50 * MB }),
  },
  {
    name: 'a connection reset after the headers',
    fast: true,
    behaviour: () => (_a, socket) => {
      socket.write(head(200, { 'Content-Length': 1000 }));
      setImmediate(() => socket.resetAndDestroy());
    },
  },
];

for (const target of [prometheus, kubeletSummary]) {
  describe(`${target.name} against a misbehaving server`, function () {
    this.timeout(30_000);
    let server: MisbehavingServer;
    let dir: string;
    let subject: Subject;
    let psi = 90;
    const sane: Behaviour = (asked, socket) => {
      if (target.path.test(asked.path)) respond(socket, 200, subject.answer(asked, psi));
      else respond(socket, 404, '{}');
    };

    beforeEach(async () => {
      server = await new MisbehavingServer().start();
      dir = mkdtempSync(join(tmpdir(), 'signals-'));
      subject = target.build(server, dir);
      psi = 90;
    });
    afterEach(async () => {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    });

    /** A high reading first, so that a leftover would show; then the fault; then sane again with a new value. */
    async function throughFault(
      behaviour: Behaviour,
      saysWhy = true,
    ): Promise<{ elapsed: number; problem: SourceProblem | undefined }> {
      server.behaviour = sane;
      await subject.refresh();
      expect(subject.read()?.psiSomeAvg10Percent, 'the sane server is read').to.equal(90);

      server.behaviour = behaviour;
      const started = performance.now();
      await subject.refresh().catch(() => undefined);
      const elapsed = performance.now() - started;
      expect(subject.read(), 'unknown, not a made-up or a leftover reading').to.equal(undefined);
      expect(elapsed, 'unknown within the timeout').to.be.below(WITHIN_MS);
      const problem = subject.problem();
      if (saysWhy) expect(problem?.reason, 'and says why').to.equal('SourceUnavailable');

      server.behaviour = sane;
      psi = 12;
      await subject.refresh();
      expect(subject.read()?.psiSomeAvg10Percent, 'read again once the server is sane').to.equal(12);
      expect(subject.problem()).to.equal(undefined);
      return { elapsed, problem };
    }

    for (const fault of faults) {
      it(`reads ${fault.name} as unknown${fault.slow ? ' when the timeout ends it' : ''}`, async () => {
        const { elapsed, problem } = await throughFault(fault.behaviour(subject));
        if (fault.slow) expect(elapsed, 'it waited for the timeout').to.be.at.least(TIMEOUT_MS * 0.8);
        if (fault.fast) expect(problem?.message, 'it did not wait for the timeout').to.not.match(/time/i);
      });
    }

    const huge: Behaviour = async (asked, socket, srv) => {
      if (target.path.test(asked.path)) await streamBody(socket, srv, { ...subject.huge, total: 50 * MB });
      else respond(socket, 404, '{}');
    };

    it('stops reading a 50 MB answer at its byte cap and hangs up', async () => {
      const cap = 1 * MB;
      subject = target.build(server, dir, cap);
      server.behaviour = huge;
      await subject.refresh().catch(() => undefined);
      expect(subject.read()).to.equal(undefined);
      expect(subject.problem()?.message).to.match(/larger than 1048576 bytes/);
      expect(await server.idle(WITHIN_MS), 'the client hung up on every answer').to.equal(true);
      const perAnswer = server.bodyBytesWritten / server.asked.length;
      // On top of what the reader read: what the kernel's socket buffers took, a few MiB on loopback.
      expect(perAnswer, 'bytes sent per answer before the hang-up').to.be.below(cap + 16 * MB);
    });

    it('keeps memory bounded across 50 MB answers with the default cap', async () => {
      expect(MAX_RESPONSE_BYTES).to.be.below(50 * MB);
      server.behaviour = huge;
      let peak = 0;
      let retained = 0;
      for (let i = 0; i < 3; i++) {
        const growth = await measureMemory(async () => {
          await subject.refresh().catch(() => undefined);
          await server.idle(WITHIN_MS);
        });
        expect(subject.read()).to.equal(undefined);
        peak = Math.max(peak, growth.peakGrowth);
        retained += growth.retainedGrowth;
      }
      // Reading the answers whole cost 300 MiB at the peak (the text, then the parsed objects). Now: what the reads
      // in flight may hold (Prometheus asks its four queries at once), and stream and socket buffers.
      const inFlight = server.asked.length / 3;
      expect(peak, 'peak growth').to.be.below(inFlight * MAX_RESPONSE_BYTES + 32 * MB);
      expect(retained, 'retained growth').to.be.below(10 * MB);
      server.behaviour = sane;
      await subject.refresh();
      expect(subject.read()?.psiSomeAvg10Percent).to.equal(90);
    });

    for (const shape of target.wrongShapes) {
      it(`reads well-formed JSON of the wrong shape as unknown: ${shape.name}`, async () => {
        await throughFault((_a, socket) => {
          respond(socket, 200, shape.body);
        }, shape.saysWhy ?? true);
      });
    }
  });
}

describe('kubeletSummaryFetcher over HTTPS, with its own HTTP library', function () {
  this.timeout(30_000);
  let server: Server;
  let dir: string;
  let cert: ServingCert;
  const sockets = new Set<Socket>();

  before(() => {
    cert = generateServingCert('127.0.0.1');
  });
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'signals-tls-'));
    server = createHttpsServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      res.setHeader('Content-Type', 'application/json');
      res.end(
        req.headers.authorization === 'Bearer t'
          ? summary({ time: '2026-11-30T09:59:58Z', psi: { some: { avg10: 42 } } })
          : '{}',
      );
    });
    server.on('connection', (socket: Socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });
  afterEach(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) =>
      server.close(() => {
        resolve();
      }),
    );
    rmSync(dir, { recursive: true, force: true });
  });

  function sourceTrusting(ca: string | undefined): KubeletSummarySource {
    const kubeconfig = join(dir, 'kubeconfig');
    const { port } = server.address() as AddressInfo;
    writeTokenKubeconfigFor(kubeconfig, `https://127.0.0.1:${port}`, ca, 't');
    return new KubeletSummarySource(kubeletSummaryFetcher(loadKubeConfig(kubeconfig), TIMEOUT_MS));
  }

  it('reads a Summary from an apiserver it trusts through the kubeconfig, with its token', async () => {
    const source = sourceTrusting(cert.caPem);
    await source.refresh([NODE]);
    expect(source.read(NODE)).to.deep.equal({
      source: 'kubeletSummary',
      observedTime: '2026-11-30T09:59:58.000Z',
      psiSomeAvg10Percent: 42,
    });
  });

  it('refuses an apiserver whose certificate the kubeconfig does not vouch for', async () => {
    const source = sourceTrusting(undefined);
    await source.refresh([NODE]);
    expect(source.read(NODE)).to.equal(undefined);
    expect(source.problem(NODE)?.message).to.match(/certificate/);
  });
});
