// The pacing webhook's HTTPS server on loopback, with a real TLS client: bad requests answered with an error and the
// server still answering (fuzzed), huge bodies cut off, slow clients timed out; and the served certificate renewed
// (generated, and replaced in --webhook-cert-dir) while a client that trusts only the registered CAs keeps calling.
import { expect } from 'chai';
import fc from 'fast-check';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpsRequest, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { generateServingCert, type ServingCert } from '../../../src/webhook/certs.js';
import {
  bracketIpv6,
  hostOfUrl,
  MAX_BODY,
  serveWebhook,
  WEBHOOK_PATH,
} from '../../../src/webhook/pacing-webhook.js';
import { WebhookServing } from '../../../src/webhook/serving.js';

const CERT = generateServingCert('127.0.0.1');
const deps = {
  decide: () => undefined,
  logger: { warn: () => undefined, info: () => undefined },
};
const review = JSON.stringify({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: { uid: 'u1', operation: 'CREATE', kind: { kind: 'Pod' }, namespace: 'shop', object: { spec: {} } },
});

/** POSTs `body` trusting `ca`; the status, the body, and the fingerprint of the certificate the server showed. */
function call(
  port: number,
  ca: string,
  body: string | Buffer = review,
  path = WEBHOOK_PATH,
): Promise<{ status: number; text: string; served: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        ca,
        agent: false,
        headers: { 'Content-Type': 'application/json' },
      },
      (res) => {
        const served = (
          res.socket as unknown as { getPeerCertificate(): { fingerprint256: string } }
        ).getPeerCertificate().fingerprint256;
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, text, served });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('the webhook server on bad requests', function () {
  this.timeout(30_000);
  let server: Server;
  let port = 0;
  before(async () => {
    ({ server, port } = await serveWebhook('127.0.0.1:0', CERT, deps, 500));
  });
  after(
    () =>
      new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      ),
  );

  it('answers an AdmissionReview 200, allowed', async () => {
    const answer = await call(port, CERT.caPem);
    expect(answer.status).to.equal(200);
    expect(JSON.parse(answer.text)).to.deep.include({ kind: 'AdmissionReview' });
  });

  it('answers 400 with the problem to what is not an AdmissionReview, 404 elsewhere', async () => {
    expect(await call(port, CERT.caPem, '{"kind":')).to.deep.include({
      status: 400,
      text: 'the body is not JSON\n',
    });
    expect((await call(port, CERT.caPem, review, '/other')).status).to.equal(404);
  });

  it(`answers a body over ${MAX_BODY} bytes 413, reads no more of it, and keeps answering`, async () => {
    const answer = await call(port, CERT.caPem, Buffer.alloc(MAX_BODY + 1024, 0x20));
    expect(answer).to.deep.include({ status: 413, text: `the body is over ${MAX_BODY} bytes\n` });
    expect((await call(port, CERT.caPem)).status).to.equal(200);
  });

  /** Opens a TLS connection, sends `partial` and nothing more; when the server closed it, and what it said. */
  const stall = (partial: string) =>
    new Promise<{ ms: number; text: string }>((resolve, reject) => {
      const started = Date.now();
      let text = '';
      const socket = connect({ host: '127.0.0.1', port, ca: CERT.caPem }, () => socket.write(partial));
      socket.on('data', (c: Buffer) => (text += c.toString()));
      socket.on('close', () => {
        resolve({ ms: Date.now() - started, text });
      });
      socket.on('error', reject);
    });

  it('cuts off a client that never finishes its headers or its body, within its timeout, and keeps answering', async () => {
    // The server's timeout is 500 ms here; Node's default check every 30 s would hold them that long.
    const headers = await stall(`POST ${WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\n`);
    expect(headers.ms).to.be.below(5_000);
    const body = await stall(
      `POST ${WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"kind"`,
    );
    expect(body.ms).to.be.below(5_000);
    expect((await call(port, CERT.caPem)).status).to.equal(200);
  });

  it('answers every body an error or an answer, never a crash (fuzzed)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.uint8Array({ maxLength: 2048 }).map((b) => Buffer.from(b)),
          fc.json().map((j) => Buffer.from(j)),
        ),
        async (body) => {
          const { status } = await call(port, CERT.caPem, body);
          expect(status).to.be.oneOf([200, 400]);
        },
      ),
      { numRuns: 150 },
    );
    expect((await call(port, CERT.caPem)).status).to.equal(200);
  });
});

describe('WebhookServing renews its certificate without a restart', function () {
  this.timeout(60_000);
  const servings: WebhookServing[] = [];
  afterEach(async () => {
    for (const s of servings.splice(0)) await s.stop();
  });

  /** What the apiserver trusts: the last bundle registered at least 200 ms ago (it learns them from a watch). */
  class LaggingApiserver {
    private readonly bundles: { at: number; pem: string }[] = [];
    register = (_url: string, caPem: string) => {
      this.bundles.push({ at: Date.now(), pem: caPem });
      return Promise.resolve({ registered: true as const, changed: true });
    };
    trusted = () =>
      [...this.bundles].reverse().find((b) => Date.now() - b.at >= 200 || b === this.bundles[0])!.pem;
    registered = () => this.bundles.map((b) => b.pem);
  }

  /** Like the apiserver: calls the webhook every 50 ms trusting only the last bundle registered. */
  async function callThrough(
    port: number,
    until: () => boolean,
    registered: () => string,
    onServed: (fingerprint: string) => void = () => undefined,
  ) {
    const served = new Set<string>();
    const failures: string[] = [];
    let calls = 0;
    const deadline = Date.now() + 30_000;
    while (!until() && Date.now() < deadline) {
      calls++;
      try {
        const answer = await call(port, registered());
        if (answer.status !== 200) failures.push(`status ${answer.status}`);
        served.add(answer.served);
        onServed(answer.served);
      } catch (err) {
        failures.push((err as Error).message);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    return { served, failures, calls };
  }

  it('a generated one: the new CA registered beside the old, then the new certificate served', async () => {
    const apiserver = new LaggingApiserver();
    const serving = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        certLifetimeMs: 9_000, // renewed with a third (3 s) left; expiry is kept to the second
        trustGraceMs: 500, // served 500 ms after its CA is registered; the apiserver takes 200 ms to trust it
        register: apiserver.register,
      },
      deps,
    );
    servings.push(serving);
    const { port } = await serving.start();
    await serving.lead();
    const bundles = apiserver.registered;
    const run = await callThrough(port, () => bundles().length >= 3, apiserver.trusted);
    expect(run.failures, 'no call failed').to.deep.equal([]);
    expect(run.served.size, 'certificates served').to.be.at.least(2);
    const cas = (bundle: string) => bundle.split('-----END CERTIFICATE-----').length - 1;
    expect(bundles().slice(0, 3).map(cas), 'CAs registered: one, then the new beside the old').to.deep.equal([
      1, 2, 2,
    ]);
  });

  it('one in --webhook-cert-dir: replaced files served once they can be used, broken ones never', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cert-dir-'));
    const warnings: string[] = [];
    const write = (cert: ServingCert, key = cert.keyPem) => {
      // As kubelet updates a Secret volume: whole files swapped in.
      for (const [file, text] of [
        ['tls.crt', cert.certPem],
        ['tls.key', key],
        ['ca.crt', cert.caPem],
      ] as const) {
        writeFileSync(join(dir, `.${file}.tmp`), text);
        renameSync(join(dir, `.${file}.tmp`), join(dir, file));
      }
    };
    try {
      const first = generateServingCert('127.0.0.1');
      const second = generateServingCert('127.0.0.1');
      write(first);
      const apiserver = new LaggingApiserver();
      const serving = new WebhookServing(
        {
          bindAddress: '127.0.0.1:0',
          url: 'https://127.0.0.1:1/mutate-pods',
          certDir: dir,
          certPollMs: 100,
          trustGraceMs: 500,
          register: apiserver.register,
        },
        { ...deps, logger: { info: () => undefined, warn: (m: string) => warnings.push(m) } },
      );
      servings.push(serving);
      const { port } = await serving.start();
      await serving.lead();
      const fingerprintOf = (c: ServingCert) => new X509Certificate(c.certPem).fingerprint256;
      expect((await call(port, apiserver.trusted())).served).to.equal(fingerprintOf(first));

      write(second, first.keyPem); // a key that is not the certificate's: kept out
      await new Promise((r) => setTimeout(r, 500));
      expect(warnings).to.deep.equal(['Kept the webhook certificate: the new files cannot be used']);
      expect((await call(port, apiserver.trusted())).served, 'still the first').to.equal(
        fingerprintOf(first),
      );

      setTimeout(() => {
        write(second);
      }, 300);
      let lastServed = '';
      const run = await callThrough(
        port,
        () => lastServed === fingerprintOf(second),
        () => apiserver.trusted(),
        (fingerprint) => (lastServed = fingerprint),
      );
      const bundle = apiserver.trusted();
      const after = await call(port, bundle);
      expect(run.failures, 'no call failed').to.deep.equal([]);
      expect(after.served, 'the second served').to.equal(fingerprintOf(second));
      expect(bundle, 'both CAs trusted').to.contain(first.caPem.trim()).and.contain(second.caPem.trim());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says once that the configuration is missing, and registers when it appears', async () => {
    const warnings: string[] = [];
    let installed = false;
    let registered = 0;
    const serving = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        recheckMs: 100,
        register: () => {
          if (!installed) return Promise.resolve({ registered: false, why: 'it is not installed' });
          registered++;
          return Promise.resolve({ registered: true, changed: true });
        },
      },
      { ...deps, logger: { info: () => undefined, warn: (m: string) => warnings.push(m) } },
    );
    servings.push(serving);
    await serving.start();
    await serving.lead();
    await new Promise((r) => setTimeout(r, 450));
    expect(warnings).to.deep.equal(['Not gating any pod: it is not installed; looking again every 100 ms']);
    installed = true;
    await new Promise((r) => setTimeout(r, 300));
    expect(registered, 'registered once installed, and checked again').to.be.at.least(1);
  });

  it('reports a registration error and tries again, never throwing; after unlead(), registers nothing', async () => {
    const warnings: string[] = [];
    let calls = 0;
    const serving = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        recheckMs: 100,
        register: () => {
          calls++;
          return calls <= 3
            ? Promise.reject(new Error('HTTP 403: refused'))
            : Promise.resolve({ registered: true, changed: calls === 4 });
        },
      },
      { ...deps, logger: { info: () => undefined, warn: (m: string) => warnings.push(m) } },
    );
    servings.push(serving);
    await serving.start();
    await serving.lead(); // does not throw
    await new Promise((r) => setTimeout(r, 600));
    expect(warnings, 'once per distinct error').to.deep.equal([
      'Failed to register the pacing webhook; trying again every 100 ms',
    ]);
    expect(calls, 'tried again until it worked, and kept checking').to.be.at.least(5);
    serving.unlead();
    const before = calls;
    await new Promise((r) => setTimeout(r, 400));
    expect(calls, 'nothing after unlead').to.be.at.most(before + 1); // one already under way
  });

  it('arms where it is told, writes only a change, disarms on a clean stop, and arms nothing more after it', async () => {
    const written: string[] = [];
    const serving = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        recheckMs: 60_000,
        register: (_url, _ca, armed) => {
          written.push(armed);
          return Promise.resolve({ registered: true, changed: true });
        },
      },
      deps,
    );
    servings.push(serving);
    await serving.start();
    await serving.arm(['shop']); // a standby: remembered, written once it leads
    expect(written, 'nothing written before it leads').to.deep.equal([]);
    await serving.lead();
    await serving.arm(['shop']);
    await serving.arm(['shop', 'web']);
    await serving.arm([]);
    await serving.arm(['web']);
    expect(written).to.deep.equal([
      "request.namespace in ['shop']",
      "request.namespace in ['shop', 'web']",
      'false',
      "request.namespace in ['web']",
    ]);
    await serving.disarm(1_000);
    await serving.arm(['shop']);
    expect(written.slice(4), 'disarmed, and kept so').to.deep.equal(['false']);
  });

  it('tries a failed arming again on the next call, and a failed disarm again within its timeout', async () => {
    const written: string[] = [];
    let failures = 0;
    const serving = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        recheckMs: 60_000,
        register: (_url, _ca, armed) => {
          if (failures > 0) {
            failures--;
            return Promise.reject(new Error('409: the object has been modified'));
          }
          written.push(armed);
          return Promise.resolve({ registered: true, changed: true });
        },
      },
      deps,
    );
    servings.push(serving);
    await serving.start();
    await serving.lead();
    failures = 1;
    await serving.arm(['shop']); // fails
    await serving.arm(['shop']); // the same namespaces: written now, not 60 s later
    failures = 2;
    await serving.disarm(2_000); // fails twice, then written
    expect(written).to.deep.equal(['false', "request.namespace in ['shop']", 'false']);
  });

  it('disarms within its timeout when the apiserver does not answer, and not at all when it does not lead', async () => {
    let answering = true;
    const hang = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        register: () =>
          answering
            ? Promise.resolve({ registered: true as const, changed: true })
            : new Promise(() => undefined),
      },
      deps,
    );
    servings.push(hang);
    await hang.start();
    await hang.lead();
    await hang.arm(['shop']);
    answering = false;
    const started = performance.now();
    await hang.disarm(200);
    expect(performance.now() - started, 'bounded by its timeout').to.be.below(2_000);

    const written: string[] = [];
    const standby = new WebhookServing(
      {
        bindAddress: '127.0.0.1:0',
        url: 'https://127.0.0.1:1/mutate-pods',
        register: (_url, _ca, armed) => {
          written.push(armed);
          return Promise.resolve({ registered: true, changed: true });
        },
      },
      deps,
    );
    servings.push(standby);
    await standby.start();
    await standby.disarm(200);
    expect(written, 'a standby writes nothing').to.deep.equal([]);
  });

  it('puts a bare IPv6 address of the URL in brackets, and names it in the certificate without them', () => {
    expect(bracketIpv6('https://fd00::5:9443/mutate-pods')).to.equal('https://[fd00::5]:9443/mutate-pods');
    expect(bracketIpv6('https://[fd00::5]:9443/mutate-pods')).to.equal('https://[fd00::5]:9443/mutate-pods');
    expect(bracketIpv6('https://10.0.0.5:9443/mutate-pods')).to.equal('https://10.0.0.5:9443/mutate-pods');
    expect(bracketIpv6('https://webhook.ns.svc:443/mutate-pods')).to.equal(
      'https://webhook.ns.svc:443/mutate-pods',
    );
    expect(new URL(bracketIpv6('https://2001:db8::1:9443/mutate-pods')).port).to.equal('9443');
    expect(hostOfUrl('https://[fd00::5]:9443/mutate-pods')).to.equal('fd00::5');
    expect(hostOfUrl('https://10.0.0.5:9443/mutate-pods')).to.equal('10.0.0.5');
    const cert = new X509Certificate(generateServingCert(hostOfUrl('https://[fd00::5]:1/x')).certPem);
    expect(cert.subjectAltName).to.equal('IP Address:FD00:0:0:0:0:0:0:5');
  });
});
