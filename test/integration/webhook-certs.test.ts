// The pacing webhook's certificate renewed under the real apiserver, without a restart: pods are created all along,
// each one a call from the apiserver to the webhook, and the apiserver's own counters show that every call was
// answered (none failed open), while the certificate the webhook serves changes. Once with a generated certificate
// (renewed when a third of its lifetime is left), once with a --webhook-cert-dir whose files are replaced by a
// certificate of another CA. The webhook is armed for the test's namespace as pacing arms it (issue 41): a policy that
// paces it, with its node saturated by a node condition.
import { CoreV1Api } from '@kubernetes/client-node';
import { expect } from 'chai';
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { generateServingCert, type ServingCert } from '../../src/webhook/certs.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubeConfig,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { freePort } from '../support/monitoring.js';
import {
  applyCrds,
  applyWebhookConfig,
  deleteWebhookConfig,
  OperatorProcess,
} from '../support/operator-process.js';
import { applyPolicy } from '../support/resources.js';
import { armedAs, armedFor } from '../support/webhook-calls.js';

const WEBHOOK = 'pacing.sandbox.remediator.io';

/** The apiserver's counters for our webhook: calls answered 200, and calls that failed and were let through. */
async function webhookCalls(): Promise<{ answered: number; failedOpen: number }> {
  const got = await kubectl(['get', '--raw', '/metrics']);
  expect(got.code, got.stderr).to.equal(0);
  const sum = (pattern: RegExp) =>
    got.stdout
      .split('\n')
      .filter((line) => pattern.test(line) && line.includes(`name="${WEBHOOK}"`))
      .reduce((total, line) => total + Number(line.split(' ').at(-1)), 0);
  return {
    answered: sum(/^apiserver_admission_webhook_request_total\{.*code="200"/),
    failedOpen: sum(/^apiserver_admission_webhook_fail_open_count\{/),
  };
}

/** The fingerprint of the certificate the webhook serves now. */
function served(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.on('error', reject);
  });
}

describe('the pacing webhook renews its certificate under the real apiserver, failing no call', function () {
  const cleanup = new Cleanup();
  const operators: OperatorProcess[] = [];
  let namespace = '';
  before(async () => {
    await applyCrds();
    await applyWebhookConfig();
    namespace = await createNamespace(cleanup, 'certs');
    await kubectl(['label', 'namespace', namespace, 'pacing=certs']);
    const { pool, names } = await createNodes(cleanup, 1);
    await applyPolicy(cleanup, uniqueName('it-certs'), {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      ioPressure: { source: 'nodeCondition', nodeCondition: { type: 'IoPressure' }, sustainSeconds: 0 },
      remediation: {
        cordon: false,
        throttleRollouts: { pacePodStarts: { namespaceSelector: { matchLabels: { pacing: 'certs' } } } },
      },
    });
    const now = new Date().toISOString();
    const condition = { type: 'IoPressure', status: 'True', reason: 'Test', message: 'set by the test' };
    const saturated = await kubectl([
      'patch',
      'node',
      names[0]!,
      '--subresource=status',
      '--type=strategic',
      '-p',
      JSON.stringify({
        status: { conditions: [{ ...condition, lastHeartbeatTime: now, lastTransitionTime: now }] },
      }),
    ]);
    expect(saturated.code, saturated.stderr).to.equal(0);
  });
  afterEach(async () => {
    for (const o of operators.splice(0)) await o.stop();
  });
  after(async function () {
    this.timeout(60_000);
    await cleanup.run();
    await deleteWebhookConfig();
  });

  /** Starts the operator's webhook on a port of its own, registered, and returns the port. */
  async function start(name: string, args: string[]): Promise<{ operator: OperatorProcess; port: number }> {
    const port = await freePort();
    const operator = new OperatorProcess();
    operators.push(operator);
    await operator.startAsOperatorAccount(name, [`--webhook-bind-address=127.0.0.1:${port}`, ...args]);
    await operator.waitForLog('Registered the pacing webhook', 30_000);
    await eventually('armed for the namespace', async () => armedFor(await armedAs(), namespace), {
      timeoutMs: 30_000,
    });
    return { operator, port };
  }

  /** Creates a pod every 200 ms (each a call to the webhook) until `done`, then 2 s more; how many. */
  async function createPodsUntil(done: () => boolean): Promise<number> {
    const core = kubeConfig().makeApiClient(CoreV1Api);
    let created = 0;
    let doneAt: number | undefined;
    const deadline = Date.now() + 120_000;
    while (Date.now() < deadline && (doneAt === undefined || Date.now() - doneAt < 2_000)) {
      await core.createNamespacedPod({
        namespace,
        body: {
          metadata: { generateName: 'call-' },
          // Never scheduled: only the admission call matters.
          spec: {
            nodeSelector: { 'sandbox.remediator.io/no-such-node': 'true' },
            containers: [{ name: 'app', image: 'registry.local/app:1' }],
          },
        },
      });
      created++;
      if (doneAt === undefined && done()) doneAt = Date.now();
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(doneAt, 'renewed within 120 s').to.not.equal(undefined);
    return created;
  }

  const renewed = (operator: OperatorProcess) =>
    operator.logs.some((l) => l.message === 'Renewed the pacing webhook certificate');

  it('generated: renewed when a third of its lifetime is left, every call answered', async function () {
    this.timeout(180_000);
    // 45 s: renewed with 15 s left, the new CA trusted 7.5 s (a sixth of the lifetime) before it is served.
    const { operator, port } = await start('certs-generated', ['--webhook-cert-lifetime-seconds=45']);
    const first = await served(port);
    const before = await webhookCalls();
    const created = await createPodsUntil(() => renewed(operator));
    const after = await webhookCalls();
    expect(await served(port), 'another certificate served').to.not.equal(first);
    expect(after.failedOpen - before.failedOpen, 'calls that failed open').to.equal(0);
    expect(after.answered - before.answered, 'calls answered').to.be.at.least(created);
  });

  it('--webhook-cert-dir: its files replaced by a certificate of another CA, taken without a restart', async function () {
    this.timeout(180_000);
    const dir = await mkdtemp(join(tmpdir(), 'webhook-certs-'));
    cleanup.add(() => rm(dir, { recursive: true, force: true }));
    // As the kubelet updates a mounted Secret: each file swapped in whole.
    const write = async (cert: ServingCert) => {
      for (const [file, text] of [
        ['tls.crt', cert.certPem],
        ['tls.key', cert.keyPem],
        ['ca.crt', cert.caPem],
      ] as const) {
        await writeFile(join(dir, `.${file}`), text);
        await rename(join(dir, `.${file}`), join(dir, file));
      }
    };
    await write(generateServingCert('127.0.0.1'));
    const { operator, port } = await start('certs-dir', [`--webhook-cert-dir=${dir}`]);
    const first = await served(port);
    const before = await webhookCalls();
    setTimeout(() => void write(generateServingCert('127.0.0.1')), 2_000);
    const created = await createPodsUntil(() => renewed(operator));
    const after = await webhookCalls();
    expect(await served(port), 'the new certificate served').to.not.equal(first);
    expect(after.failedOpen - before.failedOpen, 'calls that failed open').to.equal(0);
    expect(after.answered - before.answered, 'calls answered').to.be.at.least(created);
  });
});
