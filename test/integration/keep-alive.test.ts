// The connection pool's failure cases on the real apiserver: a restart under idle kept connections, a reset of a
// reused one mid-send, a half-open one under the leader Lease, a rotated serving certificate, and rotated client
// credentials (a certificate, a token). Nothing may be lost or sent twice where that matters.
import {
  AuthenticationV1Api,
  CoordinationV1Api,
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { connect, type TLSSocket } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadKubeConfig, withTimeout, type KubeConfigOptions } from '../../src/kube/client.js';
import { LEASE_STALL_MS, STALL_GUARD_IDLE_MS } from '../../src/kube/pooled-http.js';
import { auditEvents, resourceOf, type AuditEvent } from '../support/audit.js';
import {
  Cleanup,
  CLUSTER_DIR,
  createNamespace,
  createNodes,
  eventually,
  hack,
  KUBECONFIG,
  kubeConfig,
  kubectl,
  podBoundTo,
  uniqueName,
} from '../support/cluster.js';
import { forward } from '../support/forwarder.js';
import { freePort } from '../support/monitoring.js';
import { createToken, writeTokenKubeconfig } from '../support/tokens.js';

const run = promisify(execFile);
const PKI = join(CLUSTER_DIR, 'pki');
const log = (msg: string) => {
  console.error(`      [keep-alive] ${msg}`);
};

/** A client of the admin kubeconfig (or another) that counts its handshakes and retries. */
function pooledClient(kubeconfig = KUBECONFIG, options: KubeConfigOptions = {}) {
  const handshakes: string[] = [];
  const retries: string[] = [];
  const kc = loadKubeConfig(kubeconfig, {
    onHandshake: (lane) => handshakes.push(lane),
    onRetry: (lane, reason) => retries.push(`${lane}:${reason}`),
    ...options,
  });
  return {
    kc,
    handshakes,
    retries,
    core: kc.makeApiClient(CoreV1Api),
    leases: kc.makeApiClient(CoordinationV1Api),
    whoami: async () =>
      (
        await kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({
          body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
        })
      ).status?.userInfo?.username,
  };
}

/** Signs a key and certificate with the local cluster's CA (openssl, as hack/cluster/up.sh does). */
async function signWithClusterCa(dir: string, name: string, subject: string, extensions: string) {
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const crt = join(dir, `${name}.crt`);
  const ext = join(dir, `${name}.ext`);
  await writeFile(ext, extensions);
  await run('openssl', [
    'req',
    '-new',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    key,
    '-out',
    csr,
    '-subj',
    subject,
  ]);
  await run('openssl', [
    'x509',
    '-req',
    '-sha256',
    '-days',
    '30',
    '-in',
    csr,
    '-CA',
    join(PKI, 'ca.crt'),
    '-CAkey',
    join(PKI, 'ca.key'),
    '-CAcreateserial',
    '-out',
    crt,
    '-extfile',
    ext,
  ]);
  return { key, crt };
}

/** Written with the admin kubeconfig's client certificate (the tests' clients), not by a controller. */
const byAdmin = (event: AuditEvent) => event.user.username === 'kubernetes-admin';

const MERGE_PATCH = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/** The admin kubeconfig with another server address, or other credentials, written to `file`. */
async function kubeconfigVariant(
  file: string,
  change: { server?: string; user?: Record<string, unknown> },
): Promise<string> {
  const raw = JSON.parse(kubeConfig().exportConfig()) as {
    clusters: Array<{ cluster: { server: string } }>;
    users: Array<{ user: Record<string, unknown> }>;
  };
  for (const cluster of raw.clusters) if (change.server) cluster.cluster.server = change.server;
  for (const user of raw.users) if (change.user) user.user = change.user;
  await writeFile(file, JSON.stringify(raw));
  return file;
}

const CLIENT_EXT =
  'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n';

/** The serial number of the certificate the apiserver serves now, on a connection of its own. */
async function servedSerial(server: URL): Promise<string> {
  const socket: TLSSocket = connect({
    host: server.hostname,
    port: Number(server.port),
    rejectUnauthorized: false,
  });
  await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
  const serial = socket.getPeerCertificate().serialNumber;
  socket.destroy();
  return serial;
}

describe('kept-alive connections on the real apiserver', function () {
  this.timeout(180_000);
  const cleanup = new Cleanup();
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'keep-alive-'));
  });
  after(async () => {
    await cleanup.run();
    await rm(dir, { recursive: true, force: true });
  });

  it('sends a read again on a fresh connection when a reused one is reset mid-send; a cordon is failed, never sent twice', async () => {
    const since = new Date();
    const { names } = await createNodes(cleanup, 1);
    const node = names[0]!;
    const port = await freePort();
    const link = await forward(port, new URL(kubeConfig().getCurrentCluster()!.server));
    cleanup.add(() => link.close());
    const kubeconfig = await kubeconfigVariant(join(dir, 'through-link'), {
      server: `https://127.0.0.1:${port}`,
    });
    const client = pooledClient(kubeconfig);
    await client.core.readNode({ name: node });
    link.resetOnNextSend();
    expect((await client.core.readNode({ name: node })).metadata?.name).to.equal(node);
    expect(client.retries).to.deep.equal(['requests:reset']);

    link.resetOnNextSend();
    let failed: unknown;
    try {
      await client.core.patchNode({ name: node, body: { spec: { unschedulable: true } } }, MERGE_PATCH);
    } catch (err) {
      failed = err;
    }
    expect(failed, 'the cordon fails rather than going out twice').to.be.instanceOf(Error);
    expect(client.retries).to.deep.equal(['requests:reset']);
    const patches = (await auditEvents(since)).filter(
      (e) => e.verb === 'patch' && e.objectRef?.name === node && byAdmin(e),
    );
    expect(patches, 'the reset cordon never reached the apiserver, and was not sent again').to.deep.equal([]);
  });

  it('renews the Lease through a half-open kept connection on a fresh dial within the stall deadline', async () => {
    const port = await freePort();
    const link = await forward(port, new URL(kubeConfig().getCurrentCluster()!.server));
    cleanup.add(() => link.close());
    const namespace = await createNamespace(cleanup, 'keep-alive');
    const kubeconfig = await kubeconfigVariant(join(dir, 'lease-link'), {
      server: `https://127.0.0.1:${port}`,
    });
    const client = pooledClient(kubeconfig);
    const call = withTimeout(4_000, 'lease');
    await client.leases.createNamespacedLease(
      {
        namespace,
        body: { metadata: { name: 'l' }, spec: { holderIdentity: 'me', leaseDurationSeconds: 15 } },
      },
      call,
    );
    await client.leases.readNamespacedLease({ name: 'l', namespace }, call);
    await new Promise((resolve) => setTimeout(resolve, STALL_GUARD_IDLE_MS + 500)); // the quiet between renewals
    link.halfOpen();
    // A renewal as the elector makes it: read the Lease, then write it back on the version read.
    const started = Date.now();
    const lease = await client.leases.readNamespacedLease({ name: 'l', namespace }, call);
    lease.spec!.leaseDurationSeconds = 16;
    const renewed = await client.leases.replaceNamespacedLease({ name: 'l', namespace, body: lease }, call);
    const tookMs = Date.now() - started;
    log(`renewal through a half-open connection took ${tookMs} ms`);
    expect(renewed.spec?.holderIdentity).to.equal('me');
    expect(tookMs).to.be.at.least(LEASE_STALL_MS - 100);
    expect(tookMs, 'inside the 4 s a fresh dial would have had').to.be.below(4_000);
    expect(client.retries).to.deep.equal(['lease:stalled']);
  });

  it('trusts the apiserver’s rotated serving certificate on new connections, while kept ones carry on', async () => {
    const server = new URL(kubeConfig().getCurrentCluster()!.server);
    const kept = pooledClient(KUBECONFIG, { idleExpiryMs: 120_000 }); // kept through the reload, however long
    await kept.core.listNamespace({ limit: 1 });
    const before = await servedSerial(server);
    const original = {
      key: await readFile(join(PKI, 'apiserver.key')),
      crt: await readFile(join(PKI, 'apiserver.crt')),
    };
    const install = async (key: Buffer, crt: Buffer) => {
      // The key first: a certificate that does not match its key would be refused by the apiserver's reload.
      await writeFile(join(PKI, 'apiserver.key.new'), key);
      await writeFile(join(PKI, 'apiserver.crt.new'), crt);
      await rename(join(PKI, 'apiserver.key.new'), join(PKI, 'apiserver.key'));
      await rename(join(PKI, 'apiserver.crt.new'), join(PKI, 'apiserver.crt'));
    };
    const fresh = await signWithClusterCa(
      dir,
      'apiserver',
      '/CN=kube-apiserver',
      'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1\n',
    );
    await install(await readFile(fresh.key), await readFile(fresh.crt));
    cleanup.add(() => install(original.key, original.crt));
    await eventually(
      'the apiserver serves the new certificate',
      async () => (await servedSerial(server)) !== before,
      {
        timeoutMs: 90_000,
        intervalMs: 500,
      },
    );
    log('the apiserver reloaded its serving certificate');
    await kept.core.listNamespace({ limit: 1 });
    expect(kept.handshakes, 'the kept connection carried on, with no new handshake').to.deep.equal([
      'requests',
    ]);
    const fresher = pooledClient();
    await fresher.core.listNamespace({ limit: 1 });
    expect(
      fresher.handshakes,
      'a new connection, verified against the CA, to the new certificate',
    ).to.deep.equal(['requests']);
  });

  it('opens a new connection for a rotated client certificate and for a rotated token, each authenticated anew', async () => {
    const namespace = await createNamespace(cleanup, 'keep-alive');
    const first = await signWithClusterCa(dir, 'first', '/O=system:masters/CN=keep-alive-first', CLIENT_EXT);
    const second = await signWithClusterCa(
      dir,
      'second',
      '/O=system:masters/CN=keep-alive-second',
      CLIENT_EXT,
    );
    const crt = join(dir, 'client.crt');
    const key = join(dir, 'client.key');
    const install = async (pair: { key: string; crt: string }) => {
      await writeFile(key, await readFile(pair.key));
      await writeFile(crt, await readFile(pair.crt));
    };
    await install(first);
    const certKubeconfig = await kubeconfigVariant(join(dir, 'cert-kubeconfig'), {
      user: { 'client-certificate': crt, 'client-key': key },
    });
    const byCert = pooledClient(certKubeconfig);
    expect(await byCert.whoami()).to.equal('keep-alive-first');
    expect(await byCert.whoami()).to.equal('keep-alive-first');
    expect(byCert.handshakes, 'both on one connection').to.deep.equal(['requests']);
    await install(second);
    expect(await byCert.whoami(), 'the rotated certificate, on a new connection').to.equal(
      'keep-alive-second',
    );
    expect(byCert.handshakes).to.deep.equal(['requests', 'requests']);

    for (const sa of ['first', 'second']) await api(['create', 'serviceaccount', sa, '-n', namespace]);
    const tokenKubeconfig = await writeTokenKubeconfig(dir, 'token', await createToken(namespace, 'first'));
    const byToken = pooledClient(tokenKubeconfig);
    expect(await byToken.whoami()).to.equal(`system:serviceaccount:${namespace}:first`);
    (byToken.kc.getCurrentUser() as { token: string }).token = await createToken(namespace, 'second');
    expect(await byToken.whoami()).to.equal(`system:serviceaccount:${namespace}:second`);
    expect(byToken.handshakes).to.deep.equal(['requests', 'requests']);
  });

  it('rides out kill -9 of the apiserver under idle kept connections: a cordon and an Eviction sent once each', async () => {
    const since = new Date();
    const { names } = await createNodes(cleanup, 1);
    const node = names[0]!;
    const namespace = await createNamespace(cleanup, 'keep-alive');
    const client = pooledClient();
    const pod = uniqueName('p');
    await client.core.createNamespacedPod({ namespace, body: podBoundTo(pod, node) });
    for (let i = 0; i < 5; i++) await client.core.readNode({ name: node });
    expect(client.handshakes, 'five reads on one connection').to.deep.equal(['requests']);

    for (const action of ['kill', 'start']) {
      const result = await hack('component.sh', [action, 'kube-apiserver']);
      expect(result.code, result.stderr).to.equal(0);
    }
    // kwok's watches do not always recover from the apiserver's restart (its pods then stay as they were, which
    // later tests trip over): restart it too. The operator's client under test is this one, not kwok.
    const kwok = await hack('component.sh', ['restart', 'kwok']);
    expect(kwok.code, kwok.stderr).to.equal(0);
    log('apiserver killed and started again');
    await client.core.patchNode({ name: node, body: { spec: { unschedulable: true } } }, MERGE_PATCH);
    await client.core.createNamespacedPodEviction({
      name: pod,
      namespace,
      body: { metadata: { name: pod, namespace } },
    });
    expect((await client.core.readNode({ name: node })).spec?.unschedulable).to.equal(true);
    expect(client.handshakes.length, 'one new connection after the restart').to.equal(2);

    const events = await auditEvents(since);
    const cordons = events.filter((e) => e.verb === 'patch' && e.objectRef?.name === node && byAdmin(e));
    const evictions = events.filter((e) => resourceOf(e) === 'pods/eviction' && e.objectRef?.name === pod);
    expect(cordons.map((e) => e.responseStatus?.code)).to.deep.equal([200]);
    expect(evictions.map((e) => e.responseStatus?.code)).to.deep.equal([201]);
    // kwok and the controllers take a while to catch up after the restart, and the next test file needs a new
    // node to come Ready: wait until one does.
    await eventually(
      'kwok readies a new node after the restart',
      async () => {
        try {
          await createNodes(cleanup, 1);
          return true;
        } catch {
          return false;
        }
      },
      { timeoutMs: 150_000, intervalMs: 1_000 },
    );
  });
});

async function api(args: string[]): Promise<void> {
  const result = await kubectl(args);
  if (result.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${result.stderr}`);
}
