// The pacing webhook over its lifetime: serves it, keeps the apiserver pointed at the acting replica, and renews the
// certificate without a restart. A generated certificate is renewed when a third of its lifetime is left; one in
// --webhook-cert-dir is read again whenever its files change (cert-manager rewrites them in place). Either way the new
// CA is registered first, and served only once the apiserver has had time to learn it (trustGraceMs); the old CA
// stays trusted beside it until the next renewal, so no request the apiserver sends meets a certificate it does not
// trust.
import { createHash } from 'node:crypto';
import type { Server } from 'node:https';
import { createSecureContext } from 'node:tls';
import type { Registration } from '../kube/webhook-config.js';
import type { OperatorMetrics } from '../observability/metrics.js';
import {
  DEFAULT_CERT_LIFETIME_MS,
  expiryOf,
  generateServingCert,
  loadServingCert,
  type ServingCert,
} from './certs.js';
import { serveWebhook, type WebhookDeps } from './pacing-webhook.js';

export interface WebhookServingOptions {
  bindAddress: string;
  url: string;
  certDir?: string;
  /** A generated certificate's lifetime (default a year). */
  certLifetimeMs?: number;
  /** How often --webhook-cert-dir is read again (default 10 s). */
  certPollMs?: number;
  /** How soon a missing configuration is looked for again (default 30 s). */
  registerRetryMs?: number;
  /**
   * How long a new CA is trusted before the certificate it signed is served (default 10 s, at most a sixth of a
   * generated certificate's lifetime): the apiserver learns the new caBundle from its watch, a moment after we wrote
   * it, and a request it sends meanwhile must still meet a certificate it trusts.
   */
  trustGraceMs?: number;
  register(url: string, caPem: string): Promise<Registration>;
}

interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** Refuses a certificate and key that do not belong together, or that TLS cannot use. */
function checked(cert: ServingCert): ServingCert {
  createSecureContext({ cert: cert.certPem, key: cert.keyPem });
  expiryOf(cert.caPem);
  return cert;
}

const fingerprint = (cert: ServingCert) =>
  createHash('sha256').update(cert.certPem).update(cert.keyPem).update(cert.caPem).digest('hex');

export class WebhookServing {
  private cert: ServingCert | undefined;
  /** The CAs to register: the current one, and the previous until the next renewal. */
  private trusted = '';
  private server: Server | undefined;
  private leading = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  private lastProblem: string | undefined;

  constructor(
    private readonly options: WebhookServingOptions,
    private readonly deps: WebhookDeps & { logger: Logger; metrics?: OperatorMetrics },
  ) {}

  /** Loads or generates the certificate and listens; throws on a --webhook-cert-dir it cannot use. */
  async start(): Promise<{ port: number; origin: string }> {
    const cert = checked(this.load());
    this.cert = cert;
    this.trusted = cert.caPem;
    const { server, port } = await serveWebhook(this.options.bindAddress, cert, this.deps);
    this.server = server;
    this.noteExpiry(cert);
    this.scheduleRenewal();
    return { port, origin: cert.origin };
  }

  /** This replica acts: point the apiserver at it, now and after each renewal. Throws on an API error. */
  async lead(): Promise<void> {
    this.leading = true;
    await this.register();
  }

  /** The PEM bundle registered as the caBundle (for tests and the log). */
  trustedCas(): string {
    return this.trusted;
  }

  private load(): ServingCert {
    const { certDir, url, certLifetimeMs } = this.options;
    return certDir ? loadServingCert(certDir) : generateServingCert(new URL(url).hostname, certLifetimeMs);
  }

  private async register(): Promise<void> {
    if (!this.leading || this.stopped) return;
    clearTimeout(this.retry);
    const result = await this.options.register(this.options.url, this.trusted);
    this.deps.metrics?.webhookRegistered.set(result.registered ? 1 : 0);
    if (!result.registered) {
      // Once per distinct problem: it is looked for again quietly until it changes.
      if (result.why !== this.lastProblem)
        this.deps.logger.warn(`Not gating any pod: ${result.why}; looking again every 30 s`, {
          url: this.options.url,
        });
      this.lastProblem = result.why;
      this.retry = setTimeout(() => void this.registerQuietly(), this.options.registerRetryMs ?? 30_000);
      this.retry.unref();
      return;
    }
    this.lastProblem = undefined;
    if (result.changed) this.deps.logger.info('Registered the pacing webhook', { url: this.options.url });
  }

  private async registerQuietly(): Promise<boolean> {
    try {
      await this.register();
      return true;
    } catch (err) {
      this.deps.logger.warn('Failed to register the pacing webhook; trying again', {
        error: (err as Error).message,
      });
      this.retry = setTimeout(() => void this.registerQuietly(), this.options.registerRetryMs ?? 30_000);
      this.retry.unref();
      return false;
    }
  }

  private scheduleRenewal(): void {
    if (this.stopped || !this.cert) return;
    clearTimeout(this.timer);
    const { certDir } = this.options;
    if (certDir) {
      this.timer = setTimeout(() => void this.reread(certDir), this.options.certPollMs ?? 10_000);
    } else {
      const expiry = expiryOf(this.cert.certPem).getTime();
      const lifetime = this.options.certLifetimeMs ?? DEFAULT_CERT_LIFETIME_MS;
      // setTimeout holds at most 2^31-1 ms (24.8 days): a longer wait is taken in steps.
      const wait = Math.min(Math.max(expiry - lifetime / 3 - Date.now(), 1_000), 2 ** 31 - 1);
      this.timer = setTimeout(() => void this.renewIfDue(), wait);
    }
    this.timer.unref();
  }

  /** The certificate served now (start() made or read it). */
  private served(): ServingCert {
    if (!this.cert) throw new Error('the webhook is not started');
    return this.cert;
  }

  private async renewIfDue(): Promise<void> {
    const cert = this.served();
    const lifetime = this.options.certLifetimeMs ?? DEFAULT_CERT_LIFETIME_MS;
    if (expiryOf(cert.certPem).getTime() - Date.now() > lifetime / 3 + 1_000) {
      this.scheduleRenewal(); // a step of a long wait
      return;
    }
    await this.renew(generateServingCert(new URL(this.options.url).hostname, this.options.certLifetimeMs));
  }

  private async reread(dir: string): Promise<void> {
    let next: ServingCert | undefined;
    try {
      next = checked(loadServingCert(dir));
    } catch (err) {
      // Mid-rewrite, or broken: keep serving what works, and say why once per problem.
      const why = (err as Error).message;
      if (why !== this.lastProblem)
        this.deps.logger.warn('Kept the webhook certificate: the new files cannot be used', { error: why });
      this.lastProblem = why;
    }
    if (next && fingerprint(next) !== fingerprint(this.served())) await this.renew(next);
    else this.scheduleRenewal();
  }

  /** Trust first, then serve: the apiserver accepts the old and the new certificate while it picks up the bundle. */
  private async renew(next: ServingCert): Promise<void> {
    const previous = this.served();
    const trusted = next.caPem === previous.caPem ? next.caPem : `${next.caPem.trimEnd()}\n${previous.caPem}`;
    const before = this.trusted;
    this.trusted = trusted;
    if (!(await this.registerQuietly())) {
      this.trusted = before; // the apiserver was not told: keep serving the certificate it trusts
      this.scheduleRenewal();
      return;
    }
    if (next.caPem !== previous.caPem) await this.sleep(this.trustGrace());
    if (this.stopped) return;
    this.server?.setSecureContext({ cert: next.certPem, key: next.keyPem });
    this.cert = next;
    this.noteExpiry(next);
    this.deps.logger.info('Renewed the pacing webhook certificate', {
      certificate: next.origin,
      expires: expiryOf(next.certPem).toISOString(),
    });
    this.scheduleRenewal();
  }

  private trustGrace(): number {
    const grace = this.options.trustGraceMs ?? 10_000;
    return this.options.certDir
      ? grace
      : Math.min(grace, (this.options.certLifetimeMs ?? DEFAULT_CERT_LIFETIME_MS) / 6);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.timer = setTimeout(resolve, ms);
      this.timer.unref();
    });
  }

  private noteExpiry(cert: ServingCert): void {
    this.deps.metrics?.webhookCertExpiry.set(expiryOf(cert.certPem).getTime() / 1000);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.retry);
    const server = this.server;
    if (server)
      await new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      );
  }
}
