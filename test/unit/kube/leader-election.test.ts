import { ApiException } from '@kubernetes/client-node';
import { expect } from 'chai';
import {
  LeaderElector,
  type LeaseRecord,
  type LeaseStore,
  type StoredLease,
} from '../../../src/kube/leader-election.js';
import { FakeClock } from '../../../src/runtime/clock.js';

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** One Lease in memory with the apiserver's optimistic concurrency: a stale resourceVersion gets a 409. */
class MemoryLease {
  stored: StoredLease | undefined;
  private version = 0;
  writes: LeaseRecord[] = [];
  get() {
    return this.stored && structuredClone(this.stored);
  }
  write(record: LeaseRecord, expected?: string): StoredLease {
    if (expected === undefined ? this.stored : this.stored?.resourceVersion !== expected)
      throw new ApiException(409, 'Conflict', '{"reason":"Conflict"}', {});
    this.stored = { record: structuredClone(record), resourceVersion: String(++this.version) };
    this.writes.push(structuredClone(record));
    return structuredClone(this.stored);
  }
}

/** One candidate's view of the Lease; `mode` makes its requests fail or hang, as a partitioned replica's do. */
class CandidateStore implements LeaseStore {
  readonly description = 'ns/lease';
  mode: 'ok' | 'fail' | 'hang' | 'forbid-writes' = 'ok';
  calls = 0;
  constructor(private readonly lease: MemoryLease) {}
  private call<T>(fn: () => T, write = false): Promise<T> {
    this.calls++;
    if (write && this.mode === 'forbid-writes')
      return Promise.reject(new ApiException(403, 'Forbidden', '{"reason":"Forbidden"}', {}));
    if (this.mode === 'hang') return new Promise<T>(() => undefined);
    if (this.mode === 'fail') return Promise.reject(new Error('connect ECONNREFUSED'));
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }
  get() {
    return this.call(() => this.lease.get());
  }
  create(record: LeaseRecord) {
    return this.call(() => this.lease.write(record), true);
  }
  update(record: LeaseRecord, resourceVersion: string) {
    return this.call(() => this.lease.write(record, resourceVersion), true);
  }
}

interface Candidate {
  elector: LeaderElector;
  store: CandidateStore;
  startedAt?: number;
  stoppedAt?: number;
}

describe('LeaderElector', () => {
  let clock: FakeClock;
  let lease: MemoryLease;

  beforeEach(() => {
    clock = new FakeClock(1_000_000);
    lease = new MemoryLease();
  });

  function candidate(identity: string): Candidate {
    const store = new CandidateStore(lease);
    const c: Candidate = {
      store,
      elector: new LeaderElector({
        identity,
        store,
        clock,
        logger: quiet,
        onStartedLeading: () => {
          expect(c.startedAt, `${identity} started leading twice`).to.equal(undefined);
          c.startedAt = clock.now();
        },
        onStoppedLeading: () => {
          expect(c.stoppedAt, `${identity} stopped leading twice`).to.equal(undefined);
          c.stoppedAt = clock.now();
        },
      }),
    };
    return c;
  }

  /** Advances the fake clock in small steps, letting the electors' promises settle between them. */
  async function run(ms: number): Promise<void> {
    for (let t = 0; t < ms; t += 100) {
      clock.advance(100);
      for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  it('takes a missing Lease at once, holds it, and renews it every retry period', async () => {
    const a = candidate('a');
    a.elector.start();
    await run(100);
    expect(a.elector.isLeader()).to.equal(true);
    expect(lease.stored?.record).to.include({ holderIdentity: 'a', leaseDurationSeconds: 15 });
    await run(10_000);
    expect(lease.writes.length).to.be.within(5, 7); // one create, then a renewal every 2 s
    expect(a.stoppedAt).to.equal(undefined);
  });

  it('keeps exactly one leader among two while the leader renews', async () => {
    const a = candidate('a');
    const b = candidate('b');
    a.elector.start();
    await run(100);
    b.elector.start();
    await run(60_000);
    expect(a.elector.isLeader()).to.equal(true);
    expect(b.elector.isLeader()).to.equal(false);
    expect(b.startedAt).to.equal(undefined);
    expect(lease.stored?.record.leaseTransitions).to.equal(0);
  });

  it('lets the standby take over a crashed leader after the lease duration, within one retry period', async () => {
    const a = candidate('a');
    const b = candidate('b');
    a.elector.start();
    await run(100);
    b.elector.start();
    await run(5_000);
    const lastRenewal = lease.writes.length;
    a.store.mode = 'hang'; // kill -9: no more renewals, no release
    const crashedAt = clock.now();
    await run(25_000);
    expect(lease.writes.length).to.be.greaterThan(lastRenewal);
    expect(b.startedAt, 'the standby never took over').to.be.a('number');
    const takeover = (b.startedAt ?? 0) - crashedAt;
    // Not before the holder's lease could have run out, and without a second retry period of lag.
    expect(takeover).to.be.at.least(13_000);
    expect(takeover).to.be.at.most(17_500);
    expect(lease.stored?.record).to.include({ holderIdentity: 'b', leaseTransitions: 1 });
  });

  it('stops a leader that cannot renew within the renew deadline, before anyone may take over', async () => {
    const a = candidate('a');
    const b = candidate('b');
    a.elector.start();
    await run(100);
    b.elector.start();
    await run(4_000);
    a.store.mode = 'fail';
    const failingFrom = clock.now();
    await run(20_000);
    expect(a.stoppedAt, 'the leader never gave up').to.be.a('number');
    expect(a.elector.isLeader()).to.equal(false);
    const gaveUpAfter = (a.stoppedAt ?? 0) - failingFrom;
    expect(gaveUpAfter).to.be.within(8_000, 10_500);
    expect(b.startedAt ?? Infinity, 'b led while a still believed it led').to.be.greaterThan(
      a.stoppedAt ?? 0,
    );
  });

  it('gives up at the renew deadline even when the renewal request hangs', async () => {
    const a = candidate('a');
    a.elector.start();
    await run(100);
    a.store.mode = 'hang';
    const hungFrom = clock.now();
    await run(15_000);
    expect(a.stoppedAt, 'a hung request kept the leader leading').to.be.a('number');
    expect((a.stoppedAt ?? 0) - hungFrom).to.be.within(8_000, 10_500);
  });

  it('releases the Lease on stop, so the standby takes over within a retry period', async () => {
    const a = candidate('a');
    const b = candidate('b');
    a.elector.start();
    await run(100);
    b.elector.start();
    await run(5_000);
    const stopped = a.elector.stop();
    await run(100);
    await stopped;
    expect(lease.stored?.record.holderIdentity).to.equal('');
    const releasedAt = clock.now();
    await run(5_000);
    expect(b.startedAt).to.be.a('number');
    expect((b.startedAt ?? 0) - releasedAt).to.be.at.most(2_500);
    expect(a.stoppedAt, 'a graceful stop is not a lost lease').to.equal(undefined);
  });

  it('lets only one of two candidates that start together lead', async () => {
    const a = candidate('a');
    const b = candidate('b');
    a.elector.start();
    b.elector.start();
    await run(30_000);
    expect([a.elector.isLeader(), b.elector.isLeader()].filter(Boolean)).to.have.length(1);
    expect([a.startedAt, b.startedAt].filter((t) => t !== undefined)).to.have.length(1);
  });

  it('refuses settings where the renew deadline is not inside the lease duration', () => {
    expect(
      () =>
        new LeaderElector({
          identity: 'a',
          store: new CandidateStore(lease),
          logger: quiet,
          leaseDurationMs: 10_000,
          renewDeadlineMs: 10_000,
          onStartedLeading: () => undefined,
          onStoppedLeading: () => undefined,
        }),
    ).to.throw(/leaseDuration > renewDeadline/);
  });

  it('tries once per retry period, never in a tight loop, while the apiserver fails or refuses', async () => {
    const down = candidate('a');
    down.store.mode = 'fail';
    down.elector.start();
    await run(30_000);
    expect(down.store.calls).to.be.within(12, 16);

    // An expired Lease it may read but not write (RBAC without update): the same pace.
    lease.write({ holderIdentity: 'gone', leaseDurationSeconds: 15, leaseTransitions: 0 });
    const refused = candidate('b');
    refused.store.mode = 'forbid-writes';
    refused.elector.start();
    await run(60_000);
    expect(refused.store.calls).to.be.within(24, 64); // a get and a refused update each retry period
    expect(refused.startedAt).to.equal(undefined);
  });

  it('releases a Lease it won while it was being stopped', async () => {
    const a = candidate('a');
    a.elector.start();
    clock.advance(0); // the first attempt is under way
    const stopping = a.elector.stop();
    await run(100);
    await stopping;
    expect(lease.writes.map((w) => w.holderIdentity)).to.deep.equal(['a', '']);
    expect(a.startedAt, 'never acted').to.equal(undefined);
  });
});
