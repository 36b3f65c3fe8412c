// The webhook's TLS serving certificate: the user's (as cert-manager would mount it: tls.crt, tls.key and ca.crt
// in one directory), or one generated at start-up with its own CA, whose certificate becomes the caBundle the
// apiserver trusts (ADR 0009). node-forge generates them: Node's crypto can sign but cannot issue certificates.
import forge from 'node-forge';
import { existsSync, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';

export interface ServingCert {
  certPem: string;
  keyPem: string;
  /** The CA the apiserver must trust, PEM. */
  caPem: string;
  /** Where it came from, for the log: "generated", or the directory it was read from. */
  origin: string;
}

/** Reads tls.crt, tls.key and (when present) ca.crt from a directory; ca.crt absent means the cert is self-signed. */
export function loadServingCert(dir: string): ServingCert {
  const certPem = readFileSync(join(dir, 'tls.crt'), 'utf8');
  const keyPem = readFileSync(join(dir, 'tls.key'), 'utf8');
  const caPath = join(dir, 'ca.crt');
  return { certPem, keyPem, caPem: existsSync(caPath) ? readFileSync(caPath, 'utf8') : certPem, origin: dir };
}

function newCertificate(
  subject: string,
  publicKey: forge.pki.PublicKey,
  days: number,
): forge.pki.Certificate {
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = `01${forge.util.bytesToHex(forge.random.getBytesSync(15))}`;
  const now = new Date();
  cert.validity.notBefore = new Date(now.getTime() - 60_000);
  cert.validity.notAfter = new Date(now.getTime() + days * 86_400_000);
  cert.setSubject([{ name: 'commonName', value: subject }]);
  return cert;
}

/** A fresh CA and a serving certificate for `host` (an IP or a DNS name), valid for a year. */
export function generateServingCert(host: string): ServingCert {
  const caKeys = forge.pki.rsa.generateKeyPair(2048);
  const ca = newCertificate('sandbox-remediator-webhook-ca', caKeys.publicKey, 365);
  ca.setIssuer(ca.subject.attributes);
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
  ]);
  ca.sign(caKeys.privateKey, forge.md.sha256.create());

  const keys = forge.pki.rsa.generateKeyPair(2048);
  const cert = newCertificate(host, keys.publicKey, 365);
  cert.setIssuer(ca.subject.attributes);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames: [isIP(host) ? { type: 7, ip: host } : { type: 2, value: host }] },
  ]);
  cert.sign(caKeys.privateKey, forge.md.sha256.create());
  return {
    certPem: forge.pki.certificateToPem(cert),
    keyPem: forge.pki.privateKeyToPem(keys.privateKey),
    caPem: forge.pki.certificateToPem(ca),
    origin: 'generated',
  };
}
