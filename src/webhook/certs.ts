// The webhook's TLS serving certificate: the user's (as cert-manager mounts it: tls.crt, tls.key and ca.crt in one
// directory), or one generated with a CA of its own, at start-up and again before it expires; the CA is what the
// apiserver is told to trust, the caBundle (ADR 0009). node-forge generates them: Node's crypto can sign but cannot
// issue certificates.
import forge from 'node-forge';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { createSecureContext } from 'node:tls';
import { join } from 'node:path';

export interface ServingCert {
  certPem: string;
  keyPem: string;
  /** The CA the apiserver must trust, PEM. */
  caPem: string;
  /** Where it came from, for the log: "generated", or the directory it was read from. */
  origin: string;
}

/**
 * Reads tls.crt, tls.key and ca.crt from a directory, as cert-manager writes them. ca.crt is required: it is what
 * the apiserver is told to trust, and the leaf certificate put in its place would break at the first renewal. A
 * mounted Secret's files are links into `..data`, which the kubelet swaps whole: all three are read through one
 * resolution of it, so a swap between two reads cannot pair a new certificate with an old CA.
 */
export function loadServingCert(dir: string): ServingCert {
  const data = join(dir, '..data');
  const base = existsSync(data) ? realpathSync(data) : dir;
  const read = (file: string, what: string) => {
    const path = join(base, file);
    if (!existsSync(path))
      throw new Error(
        `${join(dir, file)} is missing: --webhook-cert-dir needs tls.crt, tls.key and ca.crt (${what})`,
      );
    return readFileSync(path, 'utf8');
  };
  return {
    certPem: read('tls.crt', 'the serving certificate'),
    keyPem: read('tls.key', 'its private key'),
    caPem: read('ca.crt', 'the CA that signed it, which the apiserver is told to trust'),
    origin: dir,
  };
}

/** The certificate, if TLS can serve it with its key and the CA it comes with signed it; throws why not. */
export function checkedCert(cert: ServingCert): ServingCert {
  createSecureContext({ cert: cert.certPem, key: cert.keyPem });
  const leaf = new X509Certificate(cert.certPem);
  const cas = cert.caPem.split(/(?<=-----END CERTIFICATE-----)/).filter((pem) => pem.includes('BEGIN'));
  if (!cas.some((pem) => leaf.verify(new X509Certificate(pem).publicKey)))
    throw new Error(`ca.crt did not sign tls.crt (${cert.origin}): the apiserver would not trust it`);
  return cert;
}

/** When a PEM certificate stops being valid. */
export const expiryOf = (certPem: string): Date => new Date(new X509Certificate(certPem).validTo);

function newCertificate(
  subject: string,
  publicKey: forge.pki.PublicKey,
  lifetimeMs: number,
): forge.pki.Certificate {
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = `01${forge.util.bytesToHex(forge.random.getBytesSync(15))}`;
  const now = new Date();
  cert.validity.notBefore = new Date(now.getTime() - 60_000);
  cert.validity.notAfter = new Date(now.getTime() + lifetimeMs);
  cert.setSubject([{ name: 'commonName', value: subject }]);
  return cert;
}

export const DEFAULT_CERT_LIFETIME_MS = 365 * 86_400_000;

/** A fresh CA and a serving certificate for `host` (an IP or a DNS name), both valid for `lifetimeMs` (a year). */
export function generateServingCert(host: string, lifetimeMs = DEFAULT_CERT_LIFETIME_MS): ServingCert {
  const caKeys = forge.pki.rsa.generateKeyPair(2048);
  // A name of its own and key identifiers: while the old and the new CA are both trusted (a renewal), a verifier
  // must find the one that signed, and OpenSSL picks by name and key identifier.
  const caName = `sandbox-remediator-webhook-ca-${new Date().toISOString()}`;
  const ca = newCertificate(caName, caKeys.publicKey, lifetimeMs);
  ca.setIssuer(ca.subject.attributes);
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  ca.sign(caKeys.privateKey, forge.md.sha256.create());

  const keys = forge.pki.rsa.generateKeyPair(2048);
  const cert = newCertificate(host, keys.publicKey, lifetimeMs);
  cert.setIssuer(ca.subject.attributes);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames: [isIP(host) ? { type: 7, ip: host } : { type: 2, value: host }] },
    { name: 'authorityKeyIdentifier', keyIdentifier: ca.generateSubjectKeyIdentifier().getBytes() },
  ]);
  cert.sign(caKeys.privateKey, forge.md.sha256.create());
  return {
    certPem: forge.pki.certificateToPem(cert),
    keyPem: forge.pki.privateKeyToPem(keys.privateKey),
    caPem: forge.pki.certificateToPem(ca),
    origin: 'generated',
  };
}
