// Leader election on a coordination.k8s.io Lease, with client-go's semantics (ADR 0010): a candidate takes the
// Lease when its holder has not renewed it for leaseDuration *as measured on the candidate's own clock* (from
// when it last saw the record change, so clocks need not agree); the leader renews every retryPeriod and gives
// up when renewDeadline passes without a successful renewal, which is shorter than leaseDuration, so it stops
// acting before anyone else may start.
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node';
import { withTimeout } from './client.js';
import { isConflict, isNotFound, describeError } from './errors.js';
import { realClock, type Clock } from '../runtime/clock.js';

/** The part of a Lease that election reads and writes. */
export interface LeaseRecord {
  holderIdentity: string;
  leaseDurationSeconds: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions: number;
}

/** A stored Lease: its record and the resourceVersion an update must carry (optimistic concurrency). */
export interface StoredLease {
  record: LeaseRecord;
  resourceVersion: string;
}

/** Where the Lease lives; create and update reject with a 409 when someone else wrote first. */
export interface LeaseStore {
  readonly description: string;
  get(): Promise<StoredLease | undefined>;
  create(record: LeaseRecord): Promise<StoredLease>;
  update(record: LeaseRecord, resourceVersion: string): Promise<StoredLease>;
}

export interface ElectionLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface LeaderElectionOptions {
  identity: string;
  store: LeaseStore;
  logger: ElectionLogger;
  /** client-go's defaults: 15 s, 10 s, 2 s. */
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  clock?: Clock;
  /** Called once, when this candidate first holds the Lease. */
  onStartedLeading(): void;
  /** Called once, when a leader could not renew within renewDeadline (or another took the Lease). */
  onStoppedLeading(): void;
  /** The holder changed (for logs and Events); "" when the Lease was released. */
  onNewLeader?(identity: string): void;
}

export const LEASE_DURATION_MS = 15_000;
export const RENEW_DEADLINE_MS = 10_000;
export const RETRY_PERIOD_MS = 2_000;

/**
 * Runs for one candidate: acquire, then renew until stopped or lost. A lost Lease is final (the process is
 * expected to exit): a leader never goes back to standing by with state it may have acted on.
 */
export class LeaderElector {
  private readonly leaseMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryMs: number;
  private readonly clock: Clock;
  /** The record as last seen, and when (local clock): expiry is judged from this, not the record's times. */
  private observed: { stored: StoredLease; at: number } | undefined;
  private leading = false;
  private lastRenewal = 0;
  private stopped = false;
  private cancelTimer: (() => void) | undefined;
  private cancelDeadline: (() => void) | undefined;
  private lost = false;
  private inFlight: Promise<void> | undefined;

  constructor(private readonly options: LeaderElectionOptions) {
    this.leaseMs = options.leaseDurationMs ?? LEASE_DURATION_MS;
    this.renewDeadlineMs = options.renewDeadlineMs ?? RENEW_DEADLINE_MS;
    this.retryMs = options.retryPeriodMs ?? RETRY_PERIOD_MS;
    // Election timing on a monotonic clock: a wall clock stepped back must not stretch a leader's deadline.
    this.clock = options.clock ?? {
      now: () => performance.now(),
      schedule: (ms, fn) => realClock.schedule(ms, fn),
    };
    if (!(this.leaseMs > this.renewDeadlineMs && this.renewDeadlineMs > this.retryMs))
      throw new Error('leader election needs leaseDuration > renewDeadline > retryPeriod');
  }

  isLeader(): boolean {
    return this.leading;
  }

  /** The holder as last seen ("" when released or unknown). */
  holder(): string {
    return this.observed?.stored.record.holderIdentity ?? '';
  }

  start(): void {
    this.schedule(0);
  }

  /**
   * Stops trying. A leader releases the Lease (empty holder, 1 s duration) so a standby takes over at its next
   * try rather than after leaseDuration: what a rolling update of the operator needs.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.cancelTimer?.();
    this.cancelDeadline?.();
    await this.inFlight;
    if (!this.leading || !this.observed) return;
    this.leading = false;
    const { stored } = this.observed;
    try {
      await this.options.store.update(
        { ...stored.record, holderIdentity: '', leaseDurationSeconds: 1 },
        stored.resourceVersion,
      );
      this.options.logger.info('Released the leader Lease', { lease: this.options.store.description });
    } catch (err) {
      this.options.logger.warn('Failed to release the leader Lease; a standby takes it when it expires', {
        lease: this.options.store.description,
        error: describeError(err),
      });
    }
  }

  private schedule(ms: number): void {
    if (this.stopped || this.lost) return;
    this.cancelTimer = this.clock.schedule(ms, () => {
      this.inFlight = this.tick().finally(() => {
        this.inFlight = undefined;
      });
    });
  }

  private async tick(): Promise<void> {
    // One attempt may not outlast the renew deadline (a hung request must not keep a leader believing it leads).
    const startedAt = this.clock.now();
    const budget = this.leading
      ? Math.max(0, this.lastRenewal + this.renewDeadlineMs - startedAt)
      : this.renewDeadlineMs;
    const { ok, errored } = await this.withTimeout(this.tryAcquireOrRenew(), budget).then(
      (won) => ({ ok: won, errored: false }),
      (err: unknown) => {
        this.options.logger.warn(
          this.leading ? 'Failed to renew the leader Lease' : 'Failed to read the leader Lease',
          { lease: this.options.store.description, error: describeError(err) },
        );
        return { ok: false, errored: true };
      },
    );
    if (this.lost) return;
    if (this.stopped) {
      // Stopped while acquiring: hold what was won just long enough for stop() to release it.
      if (ok) this.leading = true;
      return;
    }
    if (this.leading) {
      // A renewal counts from when it was sent: the apiserver may have taken long to answer.
      if (ok) this.renewed(startedAt);
      else if (this.heldByOther()) {
        this.lose();
        return;
      }
      this.schedule(this.retryMs);
      return;
    }
    if (ok) {
      this.leading = true;
      this.renewed(startedAt);
      this.options.logger.info('Became the leader: acting from now on', {
        lease: this.options.store.description,
        identity: this.options.identity,
      });
      this.options.onStartedLeading();
      this.schedule(this.retryMs);
      return;
    }
    // Standing by: come back at the next retry, or the moment the holder's lease runs out if that is sooner,
    // so a takeover after a crash takes leaseDuration plus at most one retry period of observation lag. After
    // an error (the apiserver down, no RBAC), always the retry period: never a tight loop.
    const retry = this.retryMs * (1 + Math.random() * 0.1);
    const expiresIn = this.observed ? this.observed.at + this.leaseMs - this.clock.now() : retry;
    this.schedule(errored ? retry : Math.min(retry, Math.max(100, expiresIn + 10)));
  }

  /**
   * Records a renewal sent at `sentAt` and arms the deadline: if no later renewal succeeds by sentAt +
   * renewDeadline, leadership is lost then, not at the next tick, which may come later.
   */
  private renewed(sentAt: number): void {
    this.lastRenewal = sentAt;
    this.cancelDeadline?.();
    this.cancelDeadline = this.clock.schedule(sentAt + this.renewDeadlineMs - this.clock.now(), () => {
      if (this.leading && !this.stopped && this.lastRenewal === sentAt) this.lose();
    });
  }

  private withTimeout<T>(attempt: Promise<T>, ms: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const cancel = this.clock.schedule(ms, () => {
        reject(new Error(`no answer from the apiserver within ${Math.round(ms)} ms`));
      });
      attempt.then(
        (value) => {
          cancel();
          resolve(value);
        },
        (err: unknown) => {
          cancel();
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }

  private heldByOther(): boolean {
    const holder = this.observed?.stored.record.holderIdentity;
    return holder !== undefined && holder !== '' && holder !== this.options.identity;
  }

  private lose(): void {
    if (this.lost) return;
    this.leading = false;
    this.lost = true;
    this.cancelTimer?.();
    this.cancelDeadline?.();
    this.options.logger.error('Lost the leader Lease: stopping, so two replicas never act at once', {
      lease: this.options.store.description,
      holder: this.holder(),
      msSinceLastRenewal: this.clock.now() - this.lastRenewal,
    });
    this.options.onStoppedLeading();
  }

  /** One attempt; true when this candidate holds the Lease afterwards. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const { store, identity } = this.options;
    const now = new Date(this.wallNow()).toISOString();
    const current = await store.get();
    if (!current) {
      const created = await this.write(() =>
        store.create({
          holderIdentity: identity,
          leaseDurationSeconds: this.leaseMs / 1000,
          acquireTime: now,
          renewTime: now,
          leaseTransitions: 0,
        }),
      );
      return created;
    }
    this.observe(current);
    const { record } = current;
    const mine = record.holderIdentity === identity;
    if (!mine && record.holderIdentity !== '' && !this.expired()) return false;
    const next: LeaseRecord = {
      holderIdentity: identity,
      leaseDurationSeconds: this.leaseMs / 1000,
      acquireTime: mine ? (record.acquireTime ?? now) : now,
      renewTime: now,
      leaseTransitions: mine ? record.leaseTransitions : record.leaseTransitions + 1,
    };
    return this.write(() => store.update(next, current.resourceVersion));
  }

  /** A write that lost a race (409) is a failed attempt, not an error. */
  private async write(fn: () => Promise<StoredLease>): Promise<boolean> {
    try {
      this.observe(await fn());
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  private observe(stored: StoredLease): void {
    const previous = this.observed?.stored;
    if (previous?.resourceVersion === stored.resourceVersion) return;
    const holderChanged = previous?.record.holderIdentity !== stored.record.holderIdentity;
    this.observed = { stored, at: this.clock.now() };
    if (holderChanged) this.options.onNewLeader?.(stored.record.holderIdentity);
  }

  private expired(): boolean {
    if (!this.observed) return true;
    const durationMs = Math.max(1, this.observed.stored.record.leaseDurationSeconds) * 1000;
    return this.clock.now() >= this.observed.at + durationMs;
  }

  /** Wall time for the record's timestamps (informational only: expiry uses the local clock). */
  private wallNow(): number {
    return this.options.clock ? this.options.clock.now() : Date.now();
  }
}

/** Each Lease request gives up well inside the renew deadline, so an abandoned one cannot land late; on the
 * Lease's own connections, so no burst of writes queues a renewal. */
const LEASE_CALL = withTimeout(RETRY_PERIOD_MS * 2, 'lease');

/** The Lease as a store, through the coordination.k8s.io/v1 API. */
export class KubeLeaseStore implements LeaseStore {
  private readonly api: CoordinationV1Api;
  readonly description: string;

  constructor(
    kc: KubeConfig,
    private readonly namespace: string,
    private readonly name: string,
  ) {
    this.api = kc.makeApiClient(CoordinationV1Api);
    this.description = `${namespace}/${name}`;
  }

  async get(): Promise<StoredLease | undefined> {
    try {
      return fromLease(
        await this.api.readNamespacedLease({ name: this.name, namespace: this.namespace }, LEASE_CALL),
      );
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async create(record: LeaseRecord): Promise<StoredLease> {
    return fromLease(
      await this.api.createNamespacedLease(
        { namespace: this.namespace, body: this.toLease(record) },
        LEASE_CALL,
      ),
    );
  }

  async update(record: LeaseRecord, resourceVersion: string): Promise<StoredLease> {
    return fromLease(
      await this.api.replaceNamespacedLease(
        {
          name: this.name,
          namespace: this.namespace,
          body: this.toLease(record, resourceVersion),
        },
        LEASE_CALL,
      ),
    );
  }

  private toLease(record: LeaseRecord, resourceVersion?: string): V1Lease {
    // MicroTime: client-node's V1MicroTime serialises with the microseconds the apiserver requires.
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name: this.name,
        namespace: this.namespace,
        labels: { 'app.kubernetes.io/managed-by': 'sandbox-remediator' },
        ...(resourceVersion ? { resourceVersion } : {}),
      },
      spec: {
        holderIdentity: record.holderIdentity,
        leaseDurationSeconds: record.leaseDurationSeconds,
        leaseTransitions: record.leaseTransitions,
        ...(record.acquireTime ? { acquireTime: new V1MicroTime(record.acquireTime) } : {}),
        ...(record.renewTime ? { renewTime: new V1MicroTime(record.renewTime) } : {}),
      },
    };
  }
}

export function fromLease(lease: V1Lease): StoredLease {
  const spec = lease.spec ?? {};
  const time = (value: unknown) =>
    value instanceof Date ? value.toISOString() : typeof value === 'string' ? value : undefined;
  const acquireTime = time(spec.acquireTime);
  const renewTime = time(spec.renewTime);
  return {
    resourceVersion: lease.metadata?.resourceVersion ?? '',
    record: {
      holderIdentity: spec.holderIdentity ?? '',
      leaseDurationSeconds: spec.leaseDurationSeconds ?? LEASE_DURATION_MS / 1000,
      leaseTransitions: spec.leaseTransitions ?? 0,
      ...(acquireTime ? { acquireTime } : {}),
      ...(renewTime ? { renewTime } : {}),
    },
  };
}
