import { expect } from 'chai';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateServingCert, loadServingCert } from '../../../src/webhook/certs.js';
import { gatePatch, review } from '../../../src/webhook/pacing-webhook.js';

const NOW = new Date('2026-11-30T12:00:00Z');
const request = (object: Record<string, unknown>, operation = 'CREATE') => ({
  request: { uid: 'req-1', namespace: 'shop', operation, object },
});
const decoded = (answer: object) => {
  const response = (answer as { response: { patch?: string; allowed: boolean; uid: string } }).response;
  return {
    ...response,
    patch: response.patch
      ? (JSON.parse(Buffer.from(response.patch, 'base64').toString()) as object[])
      : undefined,
  };
};
const deps = (gating: boolean, decisions: unknown[] = []) => ({
  decide: () => ({ name: 'p', namespaceSelector: {}, gating, dryRun: !gating }),
  onDecision: (d: unknown) => decisions.push(d),
  logger: { warn: () => undefined },
});

describe('pacing webhook', () => {
  it('adds our gate and stamps to a new pod, and allows it', () => {
    const answer = decoded(review(request({ metadata: { name: 'a' }, spec: {} }), deps(true), NOW));
    expect(answer).to.include({ allowed: true, uid: 'req-1' });
    expect(answer.patch).to.deep.equal([
      { op: 'add', path: '/spec/schedulingGates', value: [{ name: 'sandbox.remediator.io/paced' }] },
      {
        op: 'add',
        path: '/metadata/annotations',
        value: { 'sandbox.remediator.io/gated-by': 'p', 'sandbox.remediator.io/gated-at': NOW.toISOString() },
      },
    ]);
  });
  it('appends to existing gates and annotations, escaping the keys', () => {
    const patch = gatePatch(
      request({ metadata: { annotations: { x: 'y' } }, spec: { schedulingGates: [{ name: 'theirs' }] } })
        .request,
      'p',
      NOW,
    );
    expect(patch).to.deep.equal([
      { op: 'add', path: '/spec/schedulingGates/-', value: { name: 'sandbox.remediator.io/paced' } },
      { op: 'add', path: '/metadata/annotations/sandbox.remediator.io~1gated-by', value: 'p' },
      { op: 'add', path: '/metadata/annotations/sandbox.remediator.io~1gated-at', value: NOW.toISOString() },
    ]);
  });
  it('leaves alone pods bound past the scheduler, pods gated already, and anything but CREATE', () => {
    expect(gatePatch(request({ spec: { nodeName: 'n1' } }).request, 'p', NOW)).to.equal(undefined);
    expect(
      gatePatch(
        request({ spec: { schedulingGates: [{ name: 'sandbox.remediator.io/paced' }] } }).request,
        'p',
        NOW,
      ),
    ).to.equal(undefined);
    expect(decoded(review(request({ spec: {} }, 'UPDATE'), deps(true), NOW)).patch).to.equal(undefined);
  });
  it('in a dry run decides the same and patches nothing', () => {
    const decisions: unknown[] = [];
    const answer = decoded(review(request({ spec: {} }), deps(false, decisions), NOW));
    expect(answer).to.include({ allowed: true });
    expect(answer.patch).to.equal(undefined);
    expect(decisions).to.deep.equal([{ policy: 'p', namespace: 'shop', gated: true, dryRun: true }]);
  });
  it('generates a CA and a serving certificate the CA signed, for an IP address', () => {
    const cert = generateServingCert('127.0.0.1');
    const serving = new X509Certificate(cert.certPem);
    const ca = new X509Certificate(cert.caPem);
    expect(serving.checkIP('127.0.0.1')).to.equal('127.0.0.1');
    expect(serving.verify(ca.publicKey)).to.equal(true);
    expect(ca.ca).to.equal(true);
    expect(serving.ca).to.equal(false);
  });
  it('reads a certificate as cert-manager mounts it, with its CA as the bundle (or itself when there is no ca.crt)', () => {
    const made = generateServingCert('webhook.example.svc');
    const dir = mkdtempSync(join(tmpdir(), 'certs-'));
    try {
      writeFileSync(join(dir, 'tls.crt'), made.certPem);
      writeFileSync(join(dir, 'tls.key'), made.keyPem);
      expect(loadServingCert(dir).caPem, 'no ca.crt: the certificate itself').to.equal(made.certPem);
      writeFileSync(join(dir, 'ca.crt'), made.caPem);
      expect(loadServingCert(dir)).to.deep.include({ caPem: made.caPem, certPem: made.certPem, origin: dir });
      expect(new X509Certificate(made.certPem).checkHost('webhook.example.svc')).to.equal(
        'webhook.example.svc',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
