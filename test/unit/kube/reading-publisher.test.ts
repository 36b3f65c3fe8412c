import { expect } from 'chai';
import { createHash, X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IoReadingStatus } from '../../../src/api/v1alpha1/index.js';
import { apiStatus, describeError } from '../../../src/kube/errors.js';
import {
  AGENT_FIELD_MANAGER,
  AGENT_LIMITS_FIELD_MANAGER,
  ReadingPublisher,
} from '../../../src/kube/reading-publisher.js';
import {
  ApiClient,
  inClusterAccess,
  loadApiAccess,
  TOKEN_REREAD_MS,
  type ApiAccess,
} from '../../../src/kube/rest.js';
import { generateServingCert } from '../../../src/webhook/certs.js';

interface Seen {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** SHA-256 of the client certificate presented, if any. */
  clientCert?: string;
}

// One CA and serving certificate for 127.0.0.1, and one client certificate, for the whole file: RSA keys are slow.
let serving: ReturnType<typeof generateServingCert>;
let client: ReturnType<typeof generateServingCert>;
const fingerprint = (pem: string) => createHash('sha256').update(new X509Certificate(pem).raw).digest('hex');

/** An apiserver on 127.0.0.1 that records each request and answers what `answer` says. */
async function fakeApiserver(answer: (seen: Seen) => { status: number; body?: object } | 'silence') {
  const seen: Seen[] = [];
  const server: Server = createServer(
    { cert: serving.certPem, key: serving.keyPem, requestCert: true, rejectUnauthorized: false },
    (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const peer = (req.socket as import('node:tls').TLSSocket).getPeerCertificate();
        const request: Seen = {
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks).toString('utf8'),
        };
        // Typed as always there; without a client certificate Node gives an empty object.
        if ((peer.raw as Buffer | undefined) !== undefined)
          request.clientCert = createHash('sha256').update(peer.raw).digest('hex');
        seen.push(request);
        const reply = answer(request);
        if (reply === 'silence') return;
        res
          .writeHead(reply.status, { 'content-type': 'application/json' })
          .end(JSON.stringify(reply.body ?? {}));
      });
    },
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    seen,
    server: `https://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

const status = (code: number, reason: string, message: string) => ({
  status: code,
  body: { kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message },
});

const reading: IoReadingStatus = {
  source: 'agent',
  observedTime: '2026-11-30T10:00:00.000Z',
  psiSomeAvg10Percent: 12.5,
  heartbeatSeconds: 60,
};

describe('ReadingPublisher over kube/rest.ts', () => {
  let dir: string;
  before(function () {
    this.timeout(30_000);
    serving = generateServingCert('127.0.0.1');
    client = generateServingCert('agent');
  });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'publisher-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('server-side applies status.ioReading of its node under the agent field manager, forcing ownership', async () => {
    const api = await fakeApiserver(() => ({ status: 200, body: {} }));
    try {
      const access: ApiAccess = { server: api.server, ca: Buffer.from(serving.caPem), token: 'agent-token' };
      expect(await new ReadingPublisher(access, 'node-1').publish(reading)).to.deep.equal({
        wanted: [],
        report: undefined,
      });
      const [request] = api.seen;
      expect(request?.method).to.equal('PATCH');
      const url = new URL(request?.url ?? '', api.server);
      expect(url.pathname).to.equal('/apis/sandbox.remediator.io/v1alpha1/sandboxhealths/node-1/status');
      expect(Object.fromEntries(url.searchParams)).to.deep.equal({
        fieldManager: AGENT_FIELD_MANAGER,
        force: 'true',
      });
      expect(request?.headers['content-type']).to.equal('application/apply-patch+yaml');
      expect(request?.headers.authorization).to.equal('Bearer agent-token');
      expect(JSON.parse(request?.body ?? '')).to.deep.equal({
        apiVersion: 'sandbox.remediator.io/v1alpha1',
        kind: 'SandboxHealth',
        metadata: { name: 'node-1' },
        status: { ioReading: reading },
      });
    } finally {
      await api.close();
    }
  });

  it('answers with the IO limits the SandboxHealth holds, and reports its own under a field manager of its own', async () => {
    const limits = [
      {
        podUid: 'u1',
        pod: 'shop/db-0',
        device: '8:0',
        limit: { wbps: 4000 },
        policy: 'p',
        since: '2026-12-06T00:00:00Z',
      },
    ];
    const report = { allowed: true, observedTime: '2026-12-06T00:00:01Z' };
    const api = await fakeApiserver(() => ({
      status: 200,
      body: { spec: { nodeName: 'node-1', ioLimits: limits }, status: { ioLimits: report } },
    }));
    try {
      const publisher = new ReadingPublisher(
        { server: api.server, ca: Buffer.from(serving.caPem) },
        'node-1',
      );
      expect(await publisher.publish(reading)).to.deep.equal({ wanted: limits, report });
      expect(await publisher.publishLimits(report)).to.deep.equal({ wanted: limits, report });
      const [, limitsWrite] = api.seen;
      const url = new URL(limitsWrite?.url ?? '', api.server);
      expect(url.pathname).to.equal('/apis/sandbox.remediator.io/v1alpha1/sandboxhealths/node-1/status');
      expect(url.searchParams.get('fieldManager')).to.equal(AGENT_LIMITS_FIELD_MANAGER);
      expect(JSON.parse(limitsWrite?.body ?? '')).to.deep.include({ status: { ioLimits: report } });
    } finally {
      await api.close();
    }
  });

  it("answers 'missing' to a 404, and rejects any other refusal with the apiserver's Status", async () => {
    let answer = status(404, 'NotFound', 'sandboxhealths "node-1" not found');
    const api = await fakeApiserver(() => answer);
    try {
      const publisher = new ReadingPublisher(
        { server: api.server, ca: Buffer.from(serving.caPem) },
        'node-1',
      );
      expect(await publisher.publish(reading)).to.equal('missing');
      answer = status(403, 'Forbidden', 'the agent may write only SandboxHealth node-1');
      const err = await publisher.publish(reading).then(
        () => expect.fail('a 403 was taken for success'),
        (e: unknown) => e,
      );
      // kube/errors.ts reads it as it reads client-node's ApiException: the integration tests rely on that.
      expect(apiStatus(err)).to.deep.equal({
        code: 403,
        reason: 'Forbidden',
        message: 'the agent may write only SandboxHealth node-1',
      });
      expect(describeError(err)).to.equal(
        'the agent may write only SandboxHealth node-1 (HTTP 403 Forbidden)',
      );
    } finally {
      await api.close();
    }
  });

  it('gives up on a silent apiserver after the request timeout', async () => {
    const api = await fakeApiserver(() => 'silence');
    try {
      const publisher = new ReadingPublisher(
        { server: api.server, ca: Buffer.from(serving.caPem) },
        'node-1',
        {
          requestTimeoutMs: 200,
        },
      );
      const started = Date.now();
      const err = await publisher.publish(reading).then(
        () => expect.fail('answered'),
        (e: unknown) => e,
      );
      expect((err as Error).name).to.equal('AbortError');
      expect(describeError(err)).to.equal('timed out: no answer within the request timeout');
      expect(Date.now() - started).to.be.lessThan(5000);
    } finally {
      await api.close();
    }
  });

  it('refuses an apiserver whose certificate its CA did not sign', async function () {
    this.timeout(30_000); // another CA: two more RSA keys
    const api = await fakeApiserver(() => ({ status: 200 }));
    try {
      const other = generateServingCert('127.0.0.1');
      const publisher = new ReadingPublisher({ server: api.server, ca: Buffer.from(other.caPem) }, 'node-1');
      const err = await publisher.publish(reading).then(
        () => expect.fail('trusted a certificate of another CA'),
        (e: unknown) => e,
      );
      expect((err as NodeJS.ErrnoException).code).to.match(/CERT|SIGNATURE|ISSUER/);
      expect(api.seen).to.deep.equal([]);
    } finally {
      await api.close();
    }
  });

  it('reads a kubeconfig as the local cluster writes them: client certificate data, or a token and a CA file', async () => {
    const api = await fakeApiserver(() => ({ status: 200 }));
    try {
      const b64 = (pem: string) => Buffer.from(pem).toString('base64');
      const kubeconfig = (user: object, cluster: object) => ({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'local', cluster: { server: api.server, ...cluster } }],
        users: [{ name: 'me', user }],
        contexts: [{ name: 'local', context: { cluster: 'local', user: 'me' } }],
        'current-context': 'local',
      });
      // The admin kubeconfig of hack/cluster is YAML with inline data; test/support/tokens.ts writes JSON.
      const { stringify } = await import('yaml');
      writeFileSync(
        join(dir, 'admin.yaml'),
        stringify(
          kubeconfig(
            { 'client-certificate-data': b64(client.certPem), 'client-key-data': b64(client.keyPem) },
            { 'certificate-authority-data': b64(serving.caPem) },
          ),
        ),
      );
      writeFileSync(join(dir, 'ca.crt'), serving.caPem);
      writeFileSync(
        join(dir, 'token.kubeconfig'),
        JSON.stringify(kubeconfig({ token: 'bound-token' }, { 'certificate-authority': 'ca.crt' })),
      );

      await new ReadingPublisher(await loadApiAccess(join(dir, 'admin.yaml')), 'n').publish(reading);
      await new ReadingPublisher(await loadApiAccess(join(dir, 'token.kubeconfig')), 'n').publish(reading);
      expect(api.seen.map((s) => [s.clientCert, s.headers.authorization])).to.deep.equal([
        [fingerprint(client.certPem), undefined],
        [undefined, 'Bearer bound-token'],
      ]);
      // $KUBECONFIG when no file is named.
      const fromEnv = await loadApiAccess(undefined, {
        KUBECONFIG: join(dir, 'token.kubeconfig'),
        HOME: dir,
      });
      expect(fromEnv).to.deep.include({ server: api.server, token: 'bound-token' });
    } finally {
      await api.close();
    }
  });

  it('refuses a kubeconfig user it cannot act as, saying why', async () => {
    writeFileSync(
      join(dir, 'exec.kubeconfig'),
      JSON.stringify({
        clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:1' } }],
        users: [{ name: 'u', user: { exec: { command: 'aws' } } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
    );
    let message = '';
    await loadApiAccess(join(dir, 'exec.kubeconfig')).catch((e: unknown) => (message = (e as Error).message));
    expect(message).to.contain('authenticates by exec');
  });

  it("in the cluster, uses the ServiceAccount's CA and token, re-reading the token as it rotates", async () => {
    const api = await fakeApiserver(() => ({ status: 200 }));
    try {
      writeFileSync(join(dir, 'ca.crt'), serving.caPem);
      writeFileSync(join(dir, 'token'), 'first\n');
      const port = new URL(api.server).port;
      const access = inClusterAccess(
        { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port },
        dir,
      );
      expect(access.server).to.equal(api.server);
      // With no kubeconfig named, in $KUBECONFIG or in ~/.kube, the in-cluster ServiceAccount is what is left.
      let message = '';
      await loadApiAccess(undefined, { HOME: dir }).catch((e: unknown) => (message = (e as Error).message));
      expect(message).to.contain('not in a cluster');

      let now = 0;
      const rest = new ApiClient(access, { now: () => now });
      const get = () => rest.send({ method: 'GET', path: '/version' });
      await get();
      writeFileSync(join(dir, 'token'), 'second\n'); // the kubelet rotated it
      now = TOKEN_REREAD_MS - 1;
      await get();
      now = TOKEN_REREAD_MS;
      await get();
      expect(api.seen.map((s) => s.headers.authorization)).to.deep.equal([
        'Bearer first',
        'Bearer first',
        'Bearer second',
      ]);
      rest.close();
    } finally {
      await api.close();
    }
  });

  it('reads the token again at once after a 401, not only a minute later', async () => {
    let answer = { status: 401 };
    const api = await fakeApiserver(() => answer);
    try {
      writeFileSync(join(dir, 'token'), 'expired');
      const rest = new ApiClient(
        { server: api.server, ca: Buffer.from(serving.caPem), tokenFile: join(dir, 'token') },
        { now: () => 0 },
      );
      const err = await rest.send({ method: 'GET', path: '/version' }).then(
        () => expect.fail('a 401 was taken for success'),
        (e: unknown) => e,
      );
      expect(apiStatus(err)?.code).to.equal(401);
      writeFileSync(join(dir, 'token'), 'fresh');
      answer = { status: 200 };
      await rest.send({ method: 'GET', path: '/version' });
      expect(api.seen.map((s) => s.headers.authorization)).to.deep.equal(['Bearer expired', 'Bearer fresh']);
      rest.close();
    } finally {
      await api.close();
    }
  });
});
