import { CoordinationV1Api, CoreV1Api, type V1Lease } from '@kubernetes/client-node';
import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { loadKubeConfig, withTimeout, type KubeConfigOptions, type Lane } from '../../../src/kube/client.js';
import { ConnectionPool, IDLE_EXPIRY_MS, PooledAgent } from '../../../src/kube/connection-pool.js';
import { kubeletSummaryFetcher } from '../../../src/kube/kubelet-summary.js';
import { LEASE_STALL_MS, STALL_GUARD_IDLE_MS } from '../../../src/kube/pooled-http.js';
import { generateServingCert } from '../../../src/webhook/certs.js';
import { ok, startTlsApiserver, type Handler, type TlsApiserver } from '../../support/tls-apiserver.js';
import { rejection } from '../../support/promises.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const LEASE: V1Lease = { metadata: { name: 'l', namespace: 'n', resourceVersion: '1' } };
const leaseAnswer: Handler = (_req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ kind: 'Lease', apiVersion: 'coordination.k8s.io/v1', metadata: LEASE.metadata }));
};

/** Drops the connection of the request numbered `n` (from 1) unanswered; answers every other. */
const dropNth =
  (n: number, answer: Handler = ok): Handler =>
  (req, res, socket) => {
    if (server.requests.length === n) return 'destroy';
    return answer(req, res, socket);
  };

let server: TlsApiserver;

describe('kept-alive API connections', function () {
  this.timeout(20_000);
  const handshakes: Array<{ lane: Lane; resumed: boolean }> = [];
  const retries: string[] = [];
  const client = (options: KubeConfigOptions = {}, token?: string) => {
    const kc = loadKubeConfig(server.kubeconfig(token), {
      onHandshake: (lane, resumed) => handshakes.push({ lane, resumed }),
      onRetry: (lane, reason) => retries.push(`${lane}:${reason}`),
      ...options,
    });
    return { kc, core: kc.makeApiClient(CoreV1Api), leases: kc.makeApiClient(CoordinationV1Api) };
  };

  beforeEach(async () => {
    server = await startTlsApiserver();
    handshakes.length = 0;
    retries.length = 0;
  });
  afterEach(() => server.close());

  it('sends sequential requests on one connection, with one handshake', async () => {
    const { core } = client();
    for (let i = 0; i < 10; i++) await core.readNamespace({ name: 'n' });
    expect(server.connections.opened).to.equal(1);
    expect(new Set(server.requests.map((r) => r.connection))).to.deep.equal(new Set([1]));
    expect(handshakes).to.deep.equal([{ lane: 'requests', resumed: false }]);
  });

  it('closes a connection idle for the expiry, below the apiserver’s 90 s, and dials anew after it', async () => {
    expect(IDLE_EXPIRY_MS).to.be.below(90_000);
    const { core } = client({ idleExpiryMs: 200 });
    await core.readNamespace({ name: 'n' });
    await sleep(600);
    expect(server.connections.closed, 'the idle connection closed by us').to.equal(1);
    await core.readNamespace({ name: 'n' });
    expect(server.connections.opened).to.equal(2);
    expect(handshakes.map((h) => h.resumed)).to.deep.equal([false, true]);
  });

  it('sends a GET again, once, on a fresh connection when a reused one is reset', async () => {
    const { core } = client();
    await core.readNamespace({ name: 'n' });
    server.handle = dropNth(2);
    const answer = await core.readNamespace({ name: 'n' });
    expect(answer.metadata?.name).to.equal('n');
    expect(server.requests.map((r) => r.connection)).to.deep.equal([1, 1, 2]);
    expect(retries).to.deep.equal(['requests:reset']);
  });

  it('never sends an Eviction or a cordon twice: a reset reused connection fails them', async () => {
    const { core } = client();
    await core.readNamespace({ name: 'n' });
    server.handle = dropNth(2);
    const eviction = core.createNamespacedPodEviction({
      name: 'p',
      namespace: 'n',
      body: { metadata: { name: 'p', namespace: 'n' } },
    });
    expect((await rejection(eviction)).message).to.match(/socket hang up|ECONNRESET/);
    server.handle = dropNth(4);
    await core.readNamespace({ name: 'n' });
    const cordon = core.patchNode({ name: 'node', body: { spec: { unschedulable: true } } });
    expect((await rejection(cordon)).message).to.match(/socket hang up|ECONNRESET/);
    expect(server.requests.map((r) => r.method)).to.deep.equal(['GET', 'POST', 'GET', 'PATCH']);
    expect(retries).to.deep.equal([]);
  });

  it('does not send again what failed on a fresh connection', async () => {
    const { core } = client();
    server.handle = dropNth(1);
    await rejection(core.readNamespace({ name: 'n' }));
    expect(server.requests).to.have.length(1);
    expect(retries).to.deep.equal([]);
  });

  it('sends a Lease read again on a fresh connection when a connection idle since the last renewal stalls', async () => {
    const { leases } = client();
    const call = withTimeout(10_000, 'lease');
    server.handle = leaseAnswer;
    await leases.readNamespacedLease({ name: 'l', namespace: 'n' }, call);
    await sleep(STALL_GUARD_IDLE_MS + 100); // a retry period's quiet, as between renewals
    server.handle = (req, res, socket) =>
      server.requests.length === 2 ? 'hold' : leaseAnswer(req, res, socket);
    const started = Date.now();
    const read = await leases.readNamespacedLease({ name: 'l', namespace: 'n' }, call);
    const tookMs = Date.now() - started;
    expect(read.metadata?.name).to.equal('l');
    expect(tookMs).to.be.at.least(LEASE_STALL_MS - 100);
    expect(tookMs, 'the stall deadline, then one fresh round trip').to.be.below(LEASE_STALL_MS + 1_500);
    expect(server.requests.map((r) => `${r.method}@${r.connection}`)).to.deep.equal([
      'GET@1',
      'GET@1',
      'GET@2',
    ]);
    expect(retries).to.deep.equal(['lease:stalled']);
    expect(handshakes.map((h) => h.lane)).to.deep.equal(['lease', 'lease']);
  });

  it('never abandons the renewal’s PUT on the connection its GET just used: a slow PUT may still apply', async () => {
    const { leases } = client();
    const call = withTimeout(LEASE_STALL_MS + 1_000, 'lease');
    server.handle = leaseAnswer;
    await leases.readNamespacedLease({ name: 'l', namespace: 'n' }, call);
    server.handle = (req, res, socket) => (req.method === 'PUT' ? 'hold' : leaseAnswer(req, res, socket));
    const err = await rejection(
      leases.replaceNamespacedLease({ name: 'l', namespace: 'n', body: LEASE }, call),
    );
    expect(err.name).to.equal('AbortError');
    expect(
      server.requests.map((r) => r.method),
      'the PUT sent once',
    ).to.deep.equal(['GET', 'PUT']);
    expect(retries).to.deep.equal([]);
  });

  it('sends a replay on a new connection when every idle one is dead, and a PUT without a resourceVersion never twice', async () => {
    const { core } = client();
    await Promise.all([core.readNamespace({ name: 'n' }), core.readNamespace({ name: 'n' })]);
    expect(server.connections.opened, 'two idle connections').to.equal(2);
    server.handle = (req, res, socket) => (req.connection <= 2 ? 'destroy' : ok(req, res, socket));
    expect((await core.readNamespace({ name: 'n' })).metadata?.name).to.equal('n');
    expect(server.requests.at(-1)!.connection, 'the replay on a third, new connection').to.equal(3);
    expect(retries).to.deep.equal(['requests:reset']);
    server.handle = ok;
    await core.readNamespace({ name: 'n' });
    server.handle = (req, res, socket) => (req.method === 'PUT' ? 'destroy' : ok(req, res, socket));
    const put = core.replaceNamespace({ name: 'n', body: { metadata: { name: 'n' } } });
    expect((await rejection(put)).message).to.match(/socket hang up|ECONNRESET/);
    expect(server.requests.filter((r) => r.method === 'PUT')).to.have.length(1);
    expect(retries).to.deep.equal(['requests:reset']);
  });

  it('leaves a stalled request of the requests lane to its timeout, unsent again', async () => {
    const { core } = client({ requestTimeoutMs: LEASE_STALL_MS + 500 });
    await core.readNamespace({ name: 'n' });
    server.handle = () => 'hold';
    expect((await rejection(core.readNamespace({ name: 'n' }))).name).to.equal('AbortError');
    expect(server.requests).to.have.length(2);
    expect(retries).to.deep.equal([]);
  });

  it('keeps requests, watches and the Lease on separate connections', async () => {
    const { kc, core, leases } = client();
    await core.readNamespace({ name: 'n' });
    server.handle = leaseAnswer;
    await leases.readNamespacedLease({ name: 'l', namespace: 'n' }, withTimeout(5_000, 'lease'));
    const opts: Parameters<typeof kc.applyToHTTPSOptions>[0] = {};
    await kc.applyToHTTPSOptions(opts);
    expect((opts.agent as PooledAgent).lane).to.equal('watches');
    expect(server.connections.opened).to.equal(2);
    expect(handshakes.map((h) => h.lane)).to.deep.equal(['requests', 'lease']);
  });

  it('opens new connections for a rotated token and drains the old without cutting what is in flight', async () => {
    const { kc, core } = client({}, 'first');
    await core.readNamespace({ name: 'n' });
    let release: (() => void) | undefined;
    server.handle = (req, res, socket) => {
      if (req.authorization === 'Bearer first') {
        release = () => {
          ok(req, res, socket);
        };
        return;
      }
      return ok(req, res, socket);
    };
    const inFlight = core.readNamespace({ name: 'n' });
    await sleep(100);
    (kc.getCurrentUser() as { token: string }).token = 'second';
    await core.readNamespace({ name: 'n' });
    release!();
    expect((await inFlight).metadata?.name, 'the old token’s request still answered').to.equal('n');
    await sleep(100);
    const byToken = server.requests.map((r) => `${r.authorization}@${r.connection}`);
    expect(byToken).to.deep.equal(['Bearer first@1', 'Bearer first@1', 'Bearer second@2']);
    expect(server.connections.closed, 'the old connection closed once its answer was read').to.equal(1);
    await core.readNamespace({ name: 'n' });
    expect(server.connections.opened, 'the new credentials’ connection kept').to.equal(2);
  });

  it('opens new connections when the client certificate files are rotated', async () => {
    const kubeconfig = server.kubeconfig();
    const dir = dirname(kubeconfig);
    const writePair = () => {
      const pair = generateServingCert('client');
      writeFileSync(join(dir, 'client.crt'), pair.certPem);
      writeFileSync(join(dir, 'client.key'), pair.keyPem);
    };
    writePair();
    const config = JSON.parse((await import('node:fs')).readFileSync(kubeconfig, 'utf8')) as {
      users: Array<{ user: Record<string, string> }>;
    };
    config.users[0]!.user = {
      'client-certificate': join(dir, 'client.crt'),
      'client-key': join(dir, 'client.key'),
    };
    writeFileSync(kubeconfig, JSON.stringify(config));
    const core = loadKubeConfig(kubeconfig).makeApiClient(CoreV1Api);
    await core.readNamespace({ name: 'n' });
    await core.readNamespace({ name: 'n' });
    writePair();
    await core.readNamespace({ name: 'n' });
    await sleep(100);
    expect(server.requests.map((r) => r.connection)).to.deep.equal([1, 1, 2]);
    expect(server.connections.closed, 'the old certificate’s connection drained').to.equal(1);
  });

  it('reads a gzip answer, and bounds the kubelet fetcher’s', async () => {
    const { core } = client();
    server.handle = (_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.setHeader('content-encoding', 'gzip');
      res.end(gzipSync('{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"zipped"}}'));
    };
    expect((await core.readNamespace({ name: 'n' })).metadata?.name).to.equal('zipped');
    server.handle = (_req, res) => res.end('x'.repeat(4096));
    const summary = kubeletSummaryFetcher(client().kc, 5_000, 1_024);
    expect((await rejection(summary('node'))).message).to.match(/kubelet Summary is larger than 1024 bytes/);
  });
});

describe('ConnectionPool', () => {
  it('gives one agent per lane and credentials, and drains the previous one when they change', () => {
    const pool = new ConnectionPool();
    const a = pool.agent('requests', { ca: 'ca', cert: 'one' }, 'Bearer x');
    expect(pool.agent('requests', { ca: 'ca', cert: 'one' }, 'Bearer x')).to.equal(a);
    expect(a.inLane('lease')).to.not.equal(a);
    expect(a.inLane('lease').lane).to.equal('lease');
    const b = pool.agent('requests', { ca: 'ca', cert: 'two' }, 'Bearer x');
    expect(b).to.not.equal(a);
    expect(a.isDrained).to.equal(true);
    expect(b.isDrained).to.equal(false);
    expect(pool.agent('requests', { ca: 'ca', cert: 'two' }, 'Bearer y')).to.not.equal(b);
    expect(b.isDrained).to.equal(true);
  });
});
