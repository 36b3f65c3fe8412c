// The Pacer alone: what it publishes for the webhook, and the gates it lifts, at the rate its budget allows and only
// once that budget is reserved in status.
import { expect } from 'chai';
import { validateSandboxPolicySpec, type SandboxPolicySpec } from '../../../../src/api/v1alpha1/index.js';
import { Failures } from '../../../../src/controllers/failures.js';
import { Pacer } from '../../../../src/controllers/pacing/pacer.js';
import { silentLogger } from '../../../../src/observability/log.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import { secondsAfter, T0 } from '../../../support/builders.js';
import { MemoryCluster } from '../../../support/memory-cluster.js';

const N1 = { name: 'n1', labels: {}, unschedulable: false };

function specWith(safety: object = {}): SandboxPolicySpec {
  const result = validateSandboxPolicySpec({
    safety,
    remediation: {
      throttleRollouts: {
        pacePodStarts: { maxPodStartsPerMinute: 2, namespaceSelector: { matchLabels: { pacing: 'on' } } },
      },
    },
  });
  if (!result.valid) throw new Error(JSON.stringify(result.problems));
  return result.spec;
}

function aPacer() {
  const clock = new FakeClock(secondsAfter(T0, 600).getTime());
  const cluster = new MemoryCluster();
  const pacer = new Pacer({
    cache: cluster,
    expectations: new Expectations(clock),
    recorder: cluster,
    lifter: cluster,
    logger: silentLogger,
    clock,
  });
  /** Pods gated by policy p, the first `waited` seconds ago and each later one a second after. */
  const gate = (names: string[], waited = 30) => {
    names.forEach((name, i) =>
      cluster.gated.push({
        namespace: 'default',
        name,
        uid: `uid-${name}`,
        gates: ['sandbox.remediator.io/paced'],
        policy: 'p',
        gatedAt: new Date(clock.now() - (waited - i) * 1000),
      }),
    );
  };
  return { clock, cluster, pacer, gate };
}

describe('the Pacer', () => {
  const publications = [
    { name: 'gates under pressure', saturated: [N1], dryRun: false, safety: {}, gating: true, dry: false },
    {
      name: 'gates nothing with no pressure',
      saturated: [],
      dryRun: false,
      safety: {},
      gating: false,
      dry: false,
    },
    { name: 'only counts in a dry run', saturated: [N1], dryRun: true, safety: {}, gating: false, dry: true },
    {
      name: 'only counts while paused',
      saturated: [N1],
      dryRun: false,
      safety: { paused: true },
      gating: false,
      dry: true,
    },
  ];
  for (const { name, saturated, dryRun, safety, gating, dry } of publications)
    it(`publishes for the webhook: ${name}`, () => {
      const { clock, pacer } = aPacer();
      const plan = pacer.plan({
        policy: 'p',
        spec: specWith(safety),
        status: undefined,
        dryRun,
        saturated,
        now: new Date(clock.now()),
      });
      expect(plan.publication).to.include({ name: 'p', gating, dryRun: dry });
    });

  it('lifts paced gates at the rate, oldest first, only once their reservation is written, and logs each as lifted', async () => {
    const { clock, cluster, pacer, gate } = aPacer();
    gate(['a', 'b', 'c']);
    const now = new Date(clock.now());
    const plan = pacer.plan({
      policy: 'p',
      spec: specWith(),
      status: undefined,
      dryRun: false,
      saturated: [N1],
      now,
    });
    expect(plan.paced, 'two a minute').to.equal(2);
    expect(pacer.reservation(plan, now)).to.deep.equal([
      new Date(now.getTime() + 10_000).toISOString(),
      new Date(now.getTime() + 10_000).toISOString(),
    ]);

    const unreserved = await pacer.act(plan, false, new Failures(silentLogger, {}), now);
    expect(cluster.released, 'nothing paced is lifted unreserved').to.deep.equal([]);
    expect(unreserved.gated).to.equal(3);

    clock.advance(1_500);
    const outcome = await pacer.act(plan, true, new Failures(silentLogger, {}), now);
    expect(cluster.released).to.deep.equal(['default/a', 'default/b']);
    expect(outcome.gated).to.equal(1);
    expect(outcome.recentReleases).to.deep.equal([
      new Date(clock.now()).toISOString(),
      new Date(clock.now()).toISOString(),
    ]);
    expect(
      cluster.takeEvents().filter((e) => e.includes('PodStartHeld')),
      'each told once',
    ).to.have.length(3);
  });

  it('lifts every gate at once when the pressure is gone, spending nothing of the rate', async () => {
    const { clock, cluster, pacer, gate } = aPacer();
    gate(['a', 'b', 'c']);
    const now = new Date(clock.now());
    const plan = pacer.plan({
      policy: 'p',
      spec: specWith(),
      status: undefined,
      dryRun: false,
      saturated: [],
      now,
    });
    expect(plan.paced).to.equal(0);
    expect(pacer.reservation(plan, now)).to.equal(undefined);
    const outcome = await pacer.act(plan, false, new Failures(silentLogger, {}), now);
    expect(cluster.released).to.have.members(['default/a', 'default/b', 'default/c']);
    expect(outcome.recentReleases).to.deep.equal([]);
  });
});
