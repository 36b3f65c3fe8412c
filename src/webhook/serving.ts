// The pacing webhook over its lifetime: serves it, keeps the apiserver pointed at the acting replica, and renews the
// certificate without a restart. A generated certificate is renewed when a third of its lifetime is left; one in
// --webhook-cert-dir is read again whenever its files change (cert-manager rewrites them in place). Either way the new
// CA is registered first, and served only once the apiserver has had time to learn it (trustGraceMs); the old CA
// stays trusted beside it until the next renewal, so no request the apiserver sends meets a certificate it does not
// trust. Registrations go one at a time, each with the bundle as it is when it runs, only while this replica leads,
// and again every recheck, so a configuration deleted or reverted by someone else is put right, or reported. Each also
// arms the webhook where it paces now (arm: the namespaces a policy could gate), and a clean stop disarms it, so that
// no pod creation waits on an operator that is gone (ADR 0028).
import { createHash } from 'node:crypto';
import type { Server } from 'node:https';
import type { Registration } from '../ports/writes.js';
import { armingExpression } from '../policy/webhook-arming.js';
import type { OperatorMetrics } from '../observability/metrics.js';
import {
  checkedCert,
  DEFAULT_CERT_LIFETIME_MS,
  expiryOf,
  generateServingCert,
  loadServingCert,
  type ServingCert,
} from './certs.js';
import { hostOfUrl, serveWebhook, type WebhookDeps } from './pacing-webhook.js';

export interface WebhookServingOptions {
  bindAddress: string;
  url: string;
  certDir?: string;
  /** A generated certificate's lifetime (default a year). */
  certLifetimeMs?: number;
  /** How often --webhook-cert-dir is read again (default 10 s). */
  certPollMs?: number;
  /** How often the registration is checked while leading, and a failed one tried again (default 30 s). */
  recheckMs?: number;
  /**
   * How long a new CA is trusted before the certificate it signed is served (default 10 s, at most a sixth of a
   * generated certificate's lifetime): the apiserver learns the new caBundle from its watch, a moment after we wrote
   * it, and a request it sends meanwhile must still meet a certificate it trusts.
   */
  trustGraceMs?: number;
  /** Writes the address, the CAs to trust, and our matchCondition's CEL (armingExpression). */
  register(url: string, caPem: string, armed: string): Promise<Registration>;
}

interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** What a registration attempt came to: written or already so, nothing to fill in, or an error. */
type Attempt = 'registered' | 'missing' | 'failed';

const fingerprint = (cert: ServingCert) =>
  createHash('sha256').update(cert.certPem).update(cert.keyPem).update(cert.caPem).digest('hex');

export class WebhookServing {
  private cert: ServingCert | undefined;
  /** A renewal's certificate, made or read, waiting for its CA to be registered and trusted. */
  private pending: ServingCert | undefined;
  /** The CAs to register: the current one, and the previous (or the pending one) beside it. */
  private trusted = '';
  /** Our matchCondition's CEL: where the webhook is to be armed (nowhere until a pass says otherwise). */
  private armed = armingExpression([]);
  private armedCount = 0;
  /** The CEL this replica last wrote while leading; undefined when unknown (not written, or leadership lost). */
  private written: string | undefined;
  /** Disarmed for good (a clean stop under way): arm() changes nothing more. */
  private disarmed = false;
  private server: Server | undefined;
  private leading = false;
  private stopped = false;
  /** Registrations, one after another. */
  private chain: Promise<Attempt> = Promise.resolve('registered');
  private renewalTimer: NodeJS.Timeout | undefined;
  private recheckTimer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private renewalFailures = 0;
  private lastRegistrationProblem: string | undefined;
  private lastCertProblem: string | undefined;

  constructor(
    private readonly options: WebhookServingOptions,
    private readonly deps: WebhookDeps & { logger: Logger; metrics?: OperatorMetrics },
  ) {}

  /** Loads or generates the certificate and listens; throws on a --webhook-cert-dir it cannot use. */
  async start(): Promise<{ port: number; origin: string }> {
    const cert = checkedCert(this.load());
    this.cert = cert;
    this.trusted = cert.caPem;
    const { server, port } = await serveWebhook(this.options.bindAddress, cert, this.deps);
    this.server = server;
    this.noteExpiry(cert);
    this.scheduleRenewal();
    return { port, origin: cert.origin };
  }

  /**
   * This replica acts: point the apiserver at it now, and keep it so. Never throws: a registration that fails (an
   * API error, a configuration changed so that its policy refuses the patch) is reported and tried again, and the
   * webhook, failing open, gates nothing meanwhile; remediation goes on.
   */
  async lead(): Promise<void> {
    this.leading = true;
    await this.registerNow();
    this.scheduleRecheck();
  }

  /** Leadership lost (the fence closed): no registration from here on, not even one already queued. */
  unlead(): void {
    this.leading = false;
    this.written = undefined; // another leader may write it meanwhile
    clearTimeout(this.recheckTimer);
  }

  /**
   * Arms the webhook for new pods in these namespaces only (none: nowhere), while leading. Written when it differs
   * from what this replica last wrote, so a write that failed is tried again on the next call, not only at the
   * recheck. Resolves once the write was tried.
   */
  async arm(namespaces: readonly string[]): Promise<void> {
    if (this.disarmed) return;
    this.armed = armingExpression(namespaces);
    this.armedCount = namespaces.length;
    if (this.armed === this.written) return;
    const wanted = this.armed;
    await this.registerNow();
    if (this.written === wanted && this.leading)
      this.deps.logger.info(namespaces.length ? 'Armed the pacing webhook' : 'Disarmed the pacing webhook', {
        namespaces: namespaces.slice(0, 20),
        count: namespaces.length,
      });
  }

  /**
   * A clean stop: arms the webhook nowhere, if this replica leads, trying again until written or `timeoutMs` has
   * passed. The apiserver then calls no one while no operator runs; a standby that takes over arms it again.
   */
  async disarm(timeoutMs: number): Promise<void> {
    if (!this.leading || this.stopped) return;
    this.disarmed = true;
    this.armed = armingExpression([]);
    this.armedCount = 0;
    const until = performance.now() + timeoutMs;
    while (this.written !== this.armed && this.stillLeading() && performance.now() < until) {
      let timer: NodeJS.Timeout | undefined;
      const left = new Promise<void>((resolve) => (timer = setTimeout(resolve, until - performance.now())));
      await Promise.race([this.registerNow(), left]);
      clearTimeout(timer);
      if (this.written !== this.armed) await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  /** Read anew after an await (leadership can be lost meanwhile). */
  private stillLeading(): boolean {
    return this.leading;
  }

  private load(): ServingCert {
    const { certDir, url, certLifetimeMs } = this.options;
    return certDir ? loadServingCert(certDir) : generateServingCert(hostOfUrl(url), certLifetimeMs);
  }

  /** The certificate served now (start() made or read it). */
  private served(): ServingCert {
    if (!this.cert) throw new Error('the webhook is not started');
    return this.cert;
  }

  /** Queues a registration; it sends the bundle as it is when its turn comes. */
  private registerNow(): Promise<Attempt> {
    this.chain = this.chain.then(() => this.attempt());
    return this.chain;
  }

  private async attempt(): Promise<Attempt> {
    if (!this.leading || this.stopped) return 'registered'; // nothing of ours to keep pointed
    const { metrics, logger } = this.deps;
    const ms = this.options.recheckMs ?? 30_000;
    const recheck = `every ${ms >= 1_000 ? `${Math.round(ms / 1_000)} s` : `${ms} ms`}`;
    let result: Registration;
    const [armed, count] = [this.armed, this.armedCount];
    try {
      result = await this.options.register(this.options.url, this.trusted, armed);
    } catch (err) {
      metrics?.webhookRegistered.set(0);
      const why = (err as Error).message;
      if (why !== this.lastRegistrationProblem)
        logger.warn(`Failed to register the pacing webhook; trying again ${recheck}`, { error: why });
      this.lastRegistrationProblem = why;
      return 'failed';
    }
    metrics?.webhookRegistered.set(result.registered ? 1 : 0);
    if (!result.registered) {
      if (result.why !== this.lastRegistrationProblem)
        logger.warn(`Not gating any pod: ${result.why}; looking again ${recheck}`, { url: this.options.url });
      this.lastRegistrationProblem = result.why;
      return 'missing';
    }
    this.lastRegistrationProblem = undefined;
    if (this.stillLeading()) {
      // Not lost while the write was under way: what it wrote is ours to compare with.
      this.written = armed;
      metrics?.webhookArmedNamespaces.set(count);
    }
    if (result.changed) logger.info('Registered the pacing webhook', { url: this.options.url });
    return 'registered';
  }

  private scheduleRecheck(): void {
    clearTimeout(this.recheckTimer);
    if (!this.leading || this.stopped) return;
    this.recheckTimer = setTimeout(() => {
      void this.registerNow().then(() => {
        this.scheduleRecheck();
      });
    }, this.options.recheckMs ?? 30_000);
    this.recheckTimer.unref();
  }

  private scheduleRenewal(delayMs?: number): void {
    if (this.stopped) return;
    clearTimeout(this.renewalTimer);
    const { certDir } = this.options;
    let wait: number;
    if (delayMs !== undefined) wait = delayMs;
    else if (certDir) wait = this.options.certPollMs ?? 10_000;
    else {
      const expiry = expiryOf(this.served().certPem).getTime();
      const lifetime = this.options.certLifetimeMs ?? DEFAULT_CERT_LIFETIME_MS;
      wait = Math.max(expiry - lifetime / 3 - Date.now(), 0);
    }
    // setTimeout holds at most 2^31-1 ms (24.8 days): a longer wait is taken in steps.
    this.renewalTimer = setTimeout(() => void this.renewalTick(), Math.min(wait, 2 ** 31 - 1));
    this.renewalTimer.unref();
  }

  private async renewalTick(): Promise<void> {
    const next = this.pending ?? this.nextCert();
    if (!next) {
      this.scheduleRenewal();
      return;
    }
    this.pending = next;
    await this.renew(next);
  }

  /** The certificate to renew to now, if any: a new generated one when due, or the directory's when it changed. */
  private nextCert(): ServingCert | undefined {
    const current = this.served();
    const { certDir, url, certLifetimeMs } = this.options;
    if (!certDir) {
      const lifetime = certLifetimeMs ?? DEFAULT_CERT_LIFETIME_MS;
      if (expiryOf(current.certPem).getTime() - Date.now() > lifetime / 3 + 1_000) return undefined; // a step
      return generateServingCert(hostOfUrl(url), certLifetimeMs);
    }
    try {
      const read = checkedCert(loadServingCert(certDir));
      this.lastCertProblem = undefined;
      return fingerprint(read) === fingerprint(current) ? undefined : read;
    } catch (err) {
      // Mid-rewrite, or broken: keep serving what works, and say why once per problem.
      const why = (err as Error).message;
      if (why !== this.lastCertProblem)
        this.deps.logger.warn('Kept the webhook certificate: the new files cannot be used', { error: why });
      this.lastCertProblem = why;
      return undefined;
    }
  }

  /** Trust first, then serve: the apiserver accepts the old and the new certificate while it picks up the bundle. */
  private async renew(next: ServingCert): Promise<void> {
    const previous = this.served();
    const newCa = next.caPem !== previous.caPem;
    this.trusted = newCa ? `${next.caPem.trimEnd()}\n${previous.caPem}` : next.caPem;
    if (newCa && (await this.registerNow()) === 'failed') {
      // The apiserver was not told: keep serving the certificate it trusts, and try again, backing off (the pending
      // certificate is kept, not made again).
      this.renewalFailures++;
      this.scheduleRenewal(Math.min(5_000 * 2 ** (this.renewalFailures - 1), 300_000));
      return;
    }
    this.renewalFailures = 0;
    if (newCa) await this.sleep(this.trustGrace());
    if (this.stopped) return;
    this.server?.setSecureContext({ cert: next.certPem, key: next.keyPem });
    this.cert = next;
    this.pending = undefined;
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

  /** A wait that stop() ends at once. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      timer.unref();
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private noteExpiry(cert: ServingCert): void {
    this.deps.metrics?.webhookCertExpiry.set(expiryOf(cert.certPem).getTime() / 1000);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unlead();
    clearTimeout(this.renewalTimer);
    this.wake?.();
    const server = this.server;
    if (!server) return;
    // The apiserver keeps its connections open: idle ones are closed now, and a request still being answered gets a
    // second (it fails open anyway) before its connection is cut, so the exit never waits on the apiserver.
    const closed = new Promise<void>((resolve) =>
      server.close(() => {
        resolve();
      }),
    );
    server.closeIdleConnections();
    const cut = setTimeout(() => {
      server.closeAllConnections();
    }, 1_000);
    await closed;
    clearTimeout(cut);
  }
}
