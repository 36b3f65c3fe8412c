// config/samples/cert-manager: the Certificate the sample issues is what --webhook-cert-dir reads, for the names the
// sample's --webhook-url registers.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readManifests, REPO_ROOT } from '../../support/manifests.js';

describe('config/samples/cert-manager', () => {
  type Object = { kind: string; metadata: Record<string, unknown>; spec: Record<string, unknown> };
  const objects = readManifests('config/samples/cert-manager').map((m) => m.object as unknown as Object);
  const byKind = (kind: string) => objects.filter((o) => o.kind === kind);

  it('issues a serving certificate from a CA of its own, into the secret the operator mounts', () => {
    const serving = byKind('Certificate').find((c) => c.spec.isCA !== true)!;
    expect(serving.spec).to.deep.include({
      secretName: 'sandbox-remediator-webhook-tls',
      dnsNames: ['sandbox-remediator-webhook.sandbox-remediator-system.svc'],
    });
    const issuer = byKind('Issuer').find(
      (i) => i.metadata.name === (serving.spec.issuerRef as { name: string }).name,
    )!;
    const ca = byKind('Certificate').find((c) => c.spec.isCA === true)!;
    // A CA issuer, so the secret carries ca.crt, which --webhook-cert-dir requires.
    expect(issuer.spec).to.deep.equal({ ca: { secretName: ca.spec.secretName } });
  });

  it('is the Service whose name the certificate covers, and the URL its comments register', () => {
    const [service] = byKind('Service');
    expect(service!.metadata).to.include({
      name: 'sandbox-remediator-webhook',
      namespace: 'sandbox-remediator-system',
    });
    const text = readFileSync(
      join(REPO_ROOT, 'config/samples/cert-manager/webhook-certificate.yaml'),
      'utf8',
    );
    expect(text).to.contain(
      '--webhook-url=https://sandbox-remediator-webhook.sandbox-remediator-system.svc:9443/mutate-pods',
    );
  });
});
