import { expect } from 'chai';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { expiryOf, generateServingCert, loadServingCert } from '../../../src/webhook/certs.js';
import { gatePatch, parseReview, review } from '../../../src/webhook/pacing-webhook.js';

const NOW = new Date('2026-11-30T12:00:00Z');
const request = (object: Record<string, unknown>, operation = 'CREATE') => ({
  request: { uid: 'req-1', namespace: 'shop', operation, kind: { kind: 'Pod' }, object },
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
const deps = (gating: boolean, decisions: unknown[] = [], placements: unknown[] = []) => ({
  decide: (_namespace: string, placement: unknown) => {
    placements.push(placement);
    return { name: 'p', namespaceSelector: {}, gating, dryRun: !gating, saturated: [] };
  },
  onDecision: (d: unknown) => decisions.push(d),
  logger: { warn: () => undefined },
});

describe('pacing webhook', () => {
  it('adds our gate and stamps to a new pod, and allows it', () => {
    const answer = decoded(review(request({ metadata: { name: 'a' }, spec: {} }).request, deps(true), NOW));
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
  it('writes its own stamps over those a pod comes with, so a forged gated-at cannot jump the queue', () => {
    const forged = {
      metadata: {
        annotations: {
          'sandbox.remediator.io/gated-at': '2000-01-01T00:00:00Z',
          'sandbox.remediator.io/gated-by': 'fast',
        },
      },
      spec: { schedulingGates: [{ name: 'sandbox.remediator.io/paced' }] },
    };
    expect(gatePatch(request(forged).request, 'p', NOW)).to.deep.equal([
      { op: 'add', path: '/metadata/annotations/sandbox.remediator.io~1gated-by', value: 'p' },
      { op: 'add', path: '/metadata/annotations/sandbox.remediator.io~1gated-at', value: NOW.toISOString() },
    ]);
  });
  it('asks with where the pod may be scheduled', () => {
    const placements: unknown[] = [];
    review(
      request({ spec: { nodeSelector: { zone: 'b' }, tolerations: [{ operator: 'Exists' }] } }).request,
      deps(true, [], placements),
      NOW,
    );
    expect(placements).to.deep.equal([
      { nodeSelector: { zone: 'b' }, tolerations: [{ operator: 'Exists' }] },
    ]);
  });
  it('leaves alone pods bound past the scheduler, and anything but CREATE', () => {
    expect(gatePatch(request({ spec: { nodeName: 'n1' } }).request, 'p', NOW)).to.equal(undefined);
    expect(decoded(review(request({ spec: {} }, 'UPDATE').request, deps(true), NOW)).patch).to.equal(
      undefined,
    );
  });
  it('in a dry run decides the same and patches nothing', () => {
    const decisions: unknown[] = [];
    const answer = decoded(review(request({ spec: {} }).request, deps(false, decisions), NOW));
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
  it('reads a certificate as cert-manager mounts it, and refuses a directory without ca.crt', () => {
    const made = generateServingCert('webhook.example.svc');
    const dir = mkdtempSync(join(tmpdir(), 'certs-'));
    try {
      writeFileSync(join(dir, 'tls.crt'), made.certPem);
      writeFileSync(join(dir, 'tls.key'), made.keyPem);
      expect(() => loadServingCert(dir)).to.throw(
        `${join(dir, 'ca.crt')} is missing: --webhook-cert-dir needs tls.crt, tls.key and ca.crt`,
      );
      writeFileSync(join(dir, 'ca.crt'), made.caPem);
      expect(loadServingCert(dir)).to.deep.include({ caPem: made.caPem, certPem: made.certPem, origin: dir });
      expect(new X509Certificate(made.certPem).checkHost('webhook.example.svc')).to.equal(
        'webhook.example.svc',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('generates certificates of the lifetime asked for', () => {
    const made = generateServingCert('127.0.0.1', 90_000);
    const left = expiryOf(made.certPem).getTime() - Date.now();
    expect(left).to.be.within(80_000, 90_000);
    // Each stamped from its own clock reading, to the second: the CA's within a second or two of the leaf's.
    expect(Math.abs(expiryOf(made.caPem).getTime() - expiryOf(made.certPem).getTime())).to.be.at.most(2_000);
  });
});

describe('parseReview and review on bad input', () => {
  const review1 = (request: object) => ({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request,
  });
  const cases: [string, string, string][] = [
    ['not JSON', '{"apiVersion":', 'the body is not JSON'],
    ['JSON null', 'null', 'the body is not an admission.k8s.io/v1 AdmissionReview'],
    ['an array', '[]', 'the body is not an admission.k8s.io/v1 AdmissionReview'],
    [
      'another kind',
      '{"apiVersion":"v1","kind":"Pod"}',
      'the body is not an admission.k8s.io/v1 AdmissionReview',
    ],
    [
      'v1beta1',
      '{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}',
      'the body is not an admission.k8s.io/v1 AdmissionReview',
    ],
    ['no request', JSON.stringify(review1(null as never)), 'the AdmissionReview has no request with a uid'],
    ['a numeric uid', JSON.stringify(review1({ uid: 7 })), 'the AdmissionReview has no request with a uid'],
  ];
  for (const [name, body, problem] of cases)
    it(`names the problem with ${name}`, () => {
      expect(parseReview(body)).to.deep.equal({ problem });
    });

  it('answers anything but a pod CREATE of the shapes it reads unchanged, and allowed', () => {
    const odd: object[] = [
      { uid: 'u', operation: 'CREATE', kind: { kind: 'Secret' }, object: { spec: {} } },
      { uid: 'u', operation: 'CREATE', kind: { kind: 'Pod' }, object: 'pod' },
      { uid: 'u', operation: 'CREATE', kind: { kind: 'Pod' }, object: { spec: { schedulingGates: 'x' } } },
      { uid: 'u', operation: 'CREATE', kind: { kind: 'Pod' }, object: { spec: { schedulingGates: [7] } } },
      {
        uid: 'u',
        operation: 'CREATE',
        kind: { kind: 'Pod' },
        object: { metadata: { annotations: [] }, spec: {} },
      },
      { uid: 'u', operation: 'CREATE', kind: { kind: 'Pod' }, object: { spec: { nodeName: {} } } },
      { uid: 'u', operation: 'DELETE', kind: { kind: 'Pod' }, object: { spec: {} } },
    ];
    for (const request of odd)
      expect(decoded(review(request, deps(true), NOW)), JSON.stringify(request)).to.deep.equal({
        uid: 'u',
        allowed: true,
        patch: undefined,
      });
  });

  // Pods as odd as JSON lets them be, near the shapes gatePatch reads, as well as any JSON at all.
  const podLike = fc.record(
    {
      metadata: fc.oneof(
        fc.record({ annotations: fc.oneof(fc.dictionary(fc.string(), fc.string()), fc.jsonValue()) }),
        fc.jsonValue(),
      ),
      spec: fc.oneof(
        fc.record(
          {
            schedulingGates: fc.oneof(
              fc.array(fc.record({ name: fc.oneof(fc.string(), fc.jsonValue()) })),
              fc.jsonValue(),
            ),
            nodeName: fc.oneof(fc.string(), fc.jsonValue()),
          },
          { requiredKeys: [] },
        ),
        fc.jsonValue(),
      ),
    },
    { requiredKeys: [] },
  );
  it('never throws, and always allows, whatever JSON the request holds (fuzzed)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), podLike), fc.jsonValue(), (object, namespace) => {
        const parsed = parseReview(
          JSON.stringify(
            review1({ uid: 'u', operation: 'CREATE', kind: { kind: 'Pod' }, namespace, object }),
          ),
        );
        if ('problem' in parsed) return;
        const answer = decoded(review(parsed.request, deps(true), NOW));
        expect(answer).to.include({ allowed: true, uid: 'u' });
      }),
      { numRuns: 500 },
    );
  });
});
