// The Evictor alone: the pass's share and order, the budget reserved before evicting and spent as answered, and what
// each answer of the Eviction API leaves behind.
import { expect } from 'chai';
import type { EvictionOutcome } from '../../../../src/actuation/actuator.js';
import { EVICTIONS_PER_PASS, Evictor } from '../../../../src/controllers/remediation/evictor.js';
import { Failures } from '../../../../src/controllers/failures.js';
import { silentLogger } from '../../../../src/observability/log.js';
import type { Eviction } from '../../../../src/policy/actions.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import { T0 } from '../../../support/builders.js';

const eviction = (name: string, node = 'n1'): Eviction => ({
  kind: 'Evict',
  node,
  target: `pod/default/${name}`,
  reason: 'SandboxCreationStuckOnIo',
  message: 'stuck',
  pod: { namespace: 'default', name, uid: `uid-${name}` },
});

function anEvictor() {
  const clock = new FakeClock(T0.getTime());
  const expectations = new Expectations(clock);
  const pods = new Set<string>();
  const evictor = new Evictor({
    cache: { podByUid: (uid) => (pods.has(uid) ? ({ uid, deleting: false } as never) : undefined) },
    clock,
    expectations,
    writeConcurrency: 1,
  });
  return { clock, evictor, pods };
}

/** An actuator whose evictions answer as `answers` says, by pod name (Evicted otherwise). */
const answering = (answers: Record<string, EvictionOutcome | Error>) => ({
  evict: (pod: { name: string }) => {
    const answer = answers[pod.name] ?? { result: 'Evicted' };
    return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
  },
});

const apiError = (code: number) => Object.assign(new Error(`HTTP ${code}`), { code, body: {} });

describe('the Evictor', () => {
  it(`carries out at most ${EVICTIONS_PER_PASS} evictions a pass, in order, and leaves the rest to the next`, () => {
    const { evictor } = anEvictor();
    const decided = Array.from({ length: 11 }, (_, i) => eviction(`web-${i}`));
    const plan = evictor.plan(decided);
    expect(plan.evictions.map((e) => e.pod.name)).to.deep.equal(decided.slice(0, 8).map((e) => e.pod.name));
    expect(plan.left).to.equal(3);
  });

  it('puts a pod whose eviction a disruption budget refused after the others for 30 s', async () => {
    const { clock, evictor } = anEvictor();
    const [a, b] = [eviction('a'), eviction('b')];
    const failures = new Failures(silentLogger, {});
    const outcome = await evictor.evict(
      [a],
      answering({ a: { result: 'Blocked', message: 'PDB' } }) as never,
      failures,
      () => undefined,
    );
    expect(outcome.blocked.map((x) => x.guard)).to.deep.equal(['DisruptionBudget']);
    expect(evictor.plan([a, b]).evictions.map((e) => e.pod.name)).to.deep.equal(['b', 'a']);
    clock.advance(30_000);
    expect(evictor.plan([a, b]).evictions.map((e) => e.pod.name)).to.deep.equal(['a', 'b']);
  });

  const answers: { name: string; answer: EvictionOutcome | Error; spends: boolean; retried: boolean }[] = [
    { name: 'that succeeded', answer: { result: 'Evicted' }, spends: true, retried: false },
    { name: 'of a pod already gone', answer: { result: 'Gone' }, spends: false, retried: false },
    {
      name: 'a disruption budget refused (429)',
      answer: { result: 'Blocked', message: 'PDB' },
      spends: false,
      retried: false,
    },
    { name: 'the API refused (403)', answer: apiError(403), spends: false, retried: true },
    { name: 'that got no answer (a timeout)', answer: new Error('timed out'), spends: true, retried: true },
    { name: 'answered 503', answer: apiError(503), spends: true, retried: true },
  ];
  for (const { name, answer, spends, retried } of answers)
    it(`${spends ? 'spends' : 'spends no'} budget on an eviction ${name}${retried ? ', and has it retried' : ''}`, async () => {
      const { clock, evictor } = anEvictor();
      const failures = new Failures(silentLogger, {});
      clock.advance(1_500);
      const outcome = await evictor.evict(
        [eviction('a')],
        answering({ a: answer }) as never,
        failures,
        () => undefined,
      );
      expect(outcome.evictedAt).to.deep.equal(spends ? [clock.now()] : []);
      expect(failures.retriable).to.have.length(retried ? 1 : 0);
    });

  it('counts a pod it evicted as in flight while the cache still shows it, and never again once it is gone', async () => {
    const { evictor, pods } = anEvictor();
    pods.add('uid-a');
    await evictor.evict(
      [eviction('a')],
      answering({}) as never,
      new Failures(silentLogger, {}),
      () => undefined,
    );
    expect([...evictor.inFlight()]).to.deep.equal(['uid-a']);
    expect(evictor.lastEvictionOn('n1')).to.deep.equal(T0);
    pods.delete('uid-a');
    expect([...evictor.inFlight()]).to.deep.equal([]);
  });

  it('reserves each planned eviction at its request deadline, then logs it when answered', () => {
    const { clock, evictor } = anEvictor();
    const now = new Date(clock.now());
    const previous = { recentEvictions: [new Date(T0.getTime() - 10_000).toISOString()] } as never;
    expect(evictor.reservation(previous, 0, now)).to.equal(undefined);
    expect(evictor.reservation(previous, 2, now)).to.deep.equal([
      new Date(T0.getTime() - 10_000).toISOString(),
      new Date(T0.getTime() + 30_000).toISOString(),
      new Date(T0.getTime() + 30_000).toISOString(),
    ]);
    expect(evictor.log(previous, [T0.getTime() + 900, T0.getTime() + 400], now)).to.deep.equal([
      new Date(T0.getTime() - 10_000).toISOString(),
      new Date(T0.getTime() + 400).toISOString(),
      new Date(T0.getTime() + 900).toISOString(),
    ]);
  });
});
