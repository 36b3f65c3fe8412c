// The medik8s node lease, read as medik8s/common's lease manager reads it: when it holds, what the lease controller
// does with it (never another's unexpired lease taken, never another's released), and the guard that keeps new actions
// off a node another holder has, while undoing ours stays allowed.
import { expect } from 'chai';
import fc from 'fast-check';
import { SandboxPolicySpecSchema, type NodeStamps } from '../../../src/api/v1alpha1/index.js';
import type { NodeFacts } from '../../../src/policy/node-facts.js';
import {
  decideLease,
  heldUntil,
  isHeld,
  isHeldByOther,
  LEASE_DURATION_SECONDS,
  leaseFields,
  leaseHolder,
  leaseNode,
  nodeLeaseName,
  type LeaseWant,
  type NodeLeaseView,
} from '../../../src/policy/node-lease.js';
import { decideRemediation } from '../../../src/policy/remediation.js';
import { secondsAfter, T0 } from '../../support/builders.js';

const NOW = secondsAfter(T0, 3600);
const at = (seconds: number) => secondsAfter(NOW, seconds);
const OURS = leaseHolder('p');

/** A lease renewed `renewedAgo` seconds before NOW, lasting `duration` seconds. */
const aLease = (holder: string | undefined, renewedAgo: number, duration = 60): NodeLeaseView => ({
  node: 'n1',
  uid: 'lease-uid',
  ...(holder === undefined ? {} : { holder }),
  acquireTime: at(-renewedAgo - 30),
  renewTime: at(-renewedAgo),
  durationSeconds: duration,
  transitions: 2,
});

describe('the medik8s node lease', () => {
  it('is named node-<node> and read back to its node; other names are no node lease', () => {
    expect(nodeLeaseName('kwok-node-1')).to.equal('node-kwok-node-1');
    expect(leaseNode('node-kwok-node-1')).to.equal('kwok-node-1');
    expect(leaseNode('node-')).to.equal(undefined);
    expect(leaseNode('sandbox-remediator-operator')).to.equal(undefined);
    expect(leaseHolder('shop')).to.equal('sandbox-remediator-shop');
  });

  const held: { name: string; lease: NodeLeaseView; held: boolean; until?: string }[] = [
    { name: 'renewed 10 s ago for 60 s', lease: aLease('NodeHealthCheck-nhc', 10), held: true },
    {
      name: 'due exactly now (medik8s: not yet expired)',
      lease: aLease('NodeHealthCheck-nhc', 60),
      held: true,
    },
    {
      name: 'due a millisecond ago',
      lease: { ...aLease('x', 60), renewTime: new Date(NOW.getTime() - 60_001) },
      held: false,
    },
    { name: 'renewed 61 s ago for 60 s', lease: aLease('NodeHealthCheck-nhc', 61), held: false },
    {
      name: 'no holder named, still in time (medik8s refuses it: "unknown")',
      lease: aLease(undefined, 10),
      held: true,
    },
    {
      name: 'a renewTime ahead of our clock holds until then plus its duration',
      lease: aLease('x', -30),
      held: true,
    },
    { name: 'no renewTime', lease: { node: 'n1', uid: 'u', holder: 'x', durationSeconds: 60 }, held: false },
    {
      name: 'no leaseDurationSeconds',
      lease: { node: 'n1', uid: 'u', holder: 'x', renewTime: NOW },
      held: false,
    },
  ];
  for (const row of held)
    it(`${row.held ? 'holds' : 'does not hold'}: ${row.name}`, () => {
      expect(isHeld(row.lease, NOW)).to.equal(row.held);
    });

  it('holds until renewTime + leaseDurationSeconds, and only for others than its holder', () => {
    const lease = aLease('NodeHealthCheck-nhc', 10);
    expect(heldUntil(lease)?.toISOString()).to.equal(at(50).toISOString());
    expect(isHeldByOther(lease, OURS, NOW)).to.equal(true);
    expect(isHeldByOther(lease, 'NodeHealthCheck-nhc', NOW)).to.equal(false);
    expect(isHeldByOther(undefined, OURS, NOW)).to.equal(false);
  });

  describe('what the lease controller does', () => {
    const hold: LeaseWant = { kind: 'Hold', holder: OURS };
    const rows: { name: string; lease: NodeLeaseView | undefined; want: LeaseWant; step: string }[] = [
      { name: 'no lease, ours wanted: take it', lease: undefined, want: hold, step: 'Take' },
      {
        name: 'ours, fresh: wait for half its duration',
        lease: aLease(OURS, 10, 120),
        want: hold,
        step: 'Wait 50',
      },
      { name: 'ours, half gone: renew', lease: aLease(OURS, 60, 120), want: hold, step: 'Renew' },
      {
        name: 'ours, expired: renew (no takeover)',
        lease: aLease(OURS, 600, 120),
        want: hold,
        step: 'Renew',
      },
      {
        name: "another's, held: wait for its expiry",
        lease: aLease('NodeHealthCheck-nhc', 10),
        want: hold,
        step: 'Wait 50.001',
      },
      {
        name: "another's, expired: take it over",
        lease: aLease('NodeHealthCheck-nhc', 61),
        want: hold,
        step: 'Renew takeover',
      },
      {
        name: 'no holder, expired: take it over',
        lease: aLease(undefined, 61),
        want: hold,
        step: 'Renew takeover',
      },
      {
        name: "another policy's of ours: give it back",
        lease: aLease(leaseHolder('q'), 10),
        want: hold,
        step: 'Release',
      },
      {
        name: 'ours, no longer wanted: release',
        lease: aLease(OURS, 10),
        want: { kind: 'None' },
        step: 'Release',
      },
      {
        name: "another's, not wanted: leave it",
        lease: aLease('NodeHealthCheck-nhc', 10),
        want: { kind: 'None' },
        step: 'Wait',
      },
      {
        name: 'ours, frozen: renew when due, never release',
        lease: aLease(OURS, 60, 120),
        want: { kind: 'Keep' },
        step: 'Renew',
      },
      {
        name: 'ours, frozen, fresh: wait',
        lease: aLease(OURS, 0, 120),
        want: { kind: 'Keep' },
        step: 'Wait 60',
      },
      { name: 'none, frozen: take nothing', lease: undefined, want: { kind: 'Keep' }, step: 'Wait' },
    ];
    for (const row of rows)
      it(row.name, () => {
        const step = decideLease(row.lease, row.want, NOW);
        const words =
          step.kind === 'Wait'
            ? `Wait${step.recheckAt ? ` ${(step.recheckAt.getTime() - NOW.getTime()) / 1000}` : ''}`
            : step.kind === 'Renew' && step.takeover
              ? 'Renew takeover'
              : step.kind;
        expect(words).to.equal(row.step);
      });

    const holders = fc.constantFrom(OURS, leaseHolder('q'), 'NodeHealthCheck-nhc', 'node-maintenance', '');
    const leases = fc.option(
      fc.record({
        holder: fc.option(holders, { nil: undefined }),
        renewedAgo: fc.integer({ min: -300, max: 3600 }),
        duration: fc.option(fc.integer({ min: 1, max: 900 }), { nil: undefined }),
      }),
      { nil: undefined },
    );
    const wants = fc.constantFrom<LeaseWant>(hold, { kind: 'Keep' }, { kind: 'None' });
    const build = (l: { holder: string | undefined; renewedAgo: number; duration: number | undefined }) => {
      const lease = aLease(l.holder, l.renewedAgo);
      if (l.duration === undefined) delete lease.durationSeconds;
      else lease.durationSeconds = l.duration;
      return lease;
    };

    it('never takes over a lease another holder holds, and never releases or renews one not ours', () => {
      fc.assert(
        fc.property(leases, wants, (l, want) => {
          const lease = l && build(l);
          const step = decideLease(lease, want, NOW);
          const ours = lease?.holder?.startsWith('sandbox-remediator-') === true;
          if (lease && !ours && isHeld(lease, NOW)) expect(step.kind).to.equal('Wait');
          if (step.kind === 'Release') expect(ours).to.equal(true);
          if (step.kind === 'Renew' && !step.takeover)
            expect(lease?.holder)
              .to.equal(want.kind === 'Hold' ? OURS : lease?.holder)
              .and.match(/^sandbox-remediator-/);
          if (step.kind === 'Take') expect(lease).to.equal(undefined);
          if (want.kind !== 'Hold') expect(['Take', 'Renew takeover']).to.not.include(step.kind);
        }),
      );
    });

    it('keeps a lease of ours held: a renewal is due before it could expire', () => {
      fc.assert(
        fc.property(fc.integer({ min: 0, max: 3600 }), (renewedAgo) => {
          const lease = aLease(OURS, renewedAgo, LEASE_DURATION_SECONDS);
          const step = decideLease(lease, hold, NOW);
          if (step.kind === 'Wait') {
            expect(step.recheckAt!.getTime()).to.be.below(heldUntil(lease)!.getTime());
            expect(isHeld(lease, NOW)).to.equal(true);
          } else expect(step).to.deep.equal({ kind: 'Renew', takeover: false });
        }),
      );
    });
  });

  it('writes what medik8s writes: a new lease, a takeover counting a transition, a renewal keeping acquireTime', () => {
    expect(leaseFields(undefined, OURS, NOW)).to.deep.equal({
      holder: OURS,
      durationSeconds: LEASE_DURATION_SECONDS,
      acquireTime: NOW,
      renewTime: NOW,
      transitions: 0,
    });
    const theirs = aLease('NodeHealthCheck-nhc', 600);
    expect(leaseFields(theirs, OURS, NOW)).to.include({ acquireTime: NOW, renewTime: NOW, transitions: 3 });
    const ours = aLease(OURS, 60);
    expect(leaseFields(ours, OURS, NOW)).to.include({
      acquireTime: ours.acquireTime,
      renewTime: NOW,
      transitions: 2,
    });
  });
});

describe('the NodeLease guard', () => {
  const spec = SandboxPolicySpecSchema.parse({ safety: { maxUnhealthyNodes: 3, cooldownSeconds: 300 } });
  const facts = (overrides: Partial<NodeFacts> = {}): NodeFacts => ({
    name: 'n1',
    ready: true,
    controlPlane: false,
    unschedulable: false,
    taints: [],
    degradedByIo: true,
    io: 'High',
    ioCause: 'Unknown',
    ioStuckPods: [{ namespace: 'default', name: 'web-1', uid: 'uid-web-1', controllerKind: 'ReplicaSet' }],
    ioHeavyPods: [],
    migrated: 0,
    ...overrides,
  });
  const healthy = (name: string): NodeFacts => ({
    ...facts(),
    name,
    degradedByIo: false,
    io: 'Low',
    ioStuckPods: [],
  });
  const decide = (n1: NodeFacts) =>
    decideRemediation({
      policy: 'p',
      spec,
      nodes: [n1, healthy('n2'), healthy('n3'), healthy('n4')],
      now: NOW,
      recentEvictions: [],
      cacheReady: true,
    });
  const nhc = aLease('NodeHealthCheck-nhc', 10);

  it('holds the cordon of a node another holder has, naming the holder and when it lifts', () => {
    const decision = decide(facts({ lease: nhc }));
    expect(decision.actions).to.deep.equal([]);
    expect(decision.blocked).to.deep.equal([
      {
        kind: 'Cordon',
        node: 'n1',
        target: 'node/n1',
        guard: 'NodeLease',
        message: `medik8s-leases/node-n1 is held by NodeHealthCheck-nhc until ${at(50).toISOString()}: hands off while another holder has the node`,
        liftsAt: new Date(at(50).getTime() + 1),
      },
    ]);
  });

  it('cordons once the lease has expired, or when it is ours', () => {
    for (const lease of [aLease('NodeHealthCheck-nhc', 61), aLease(OURS, 10)])
      expect(decide(facts({ lease })).actions.map((a) => a.kind)).to.deep.equal(['Cordon']);
  });

  const stamps: NodeStamps = { policy: 'p', since: at(-3600), reason: 'r', cordoned: true };
  it('holds the evictions on a node we fenced once another holder has it', () => {
    const decision = decide(facts({ unschedulable: true, stamps, lease: nhc }));
    expect(decision.actions).to.deep.equal([]);
    expect(decision.blocked.map((b) => `${b.kind} ${b.guard}`)).to.deep.equal(['Evict NodeLease']);
  });

  it('waits to undo what is ours on recovery while another holder has the node (its maintenance may be under way)', () => {
    const recovered = facts({
      unschedulable: true,
      stamps,
      lease: nhc,
      degradedByIo: false,
      io: 'Low',
      ioStuckPods: [],
      quietSince: at(-600),
    });
    const decision = decide(recovered);
    expect(decision.actions).to.deep.equal([]);
    expect(decision.blocked.map((b) => `${b.kind} ${b.guard}`)).to.deep.equal(['Uncordon NodeLease']);
    expect(decision.blocked[0]?.message).to.match(/the undo waits$/);
    const { lease: _lease, ...withoutLease } = recovered;
    const released = decide(withoutLease);
    expect(released.actions.map((a) => `${a.kind} ${a.reason}`)).to.deep.equal(['Uncordon Recovered']);
  });
});
