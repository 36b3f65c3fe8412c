import { expect } from 'chai';
import fc from 'fast-check';
import type { SandboxHealthStatus } from '../../../src/api/v1alpha1/index.js';
import { healthPatch } from '../../../src/status/health-patch.js';
import { applyMergePatch, mergePatchFrom } from '../../../src/status/merge-patch.js';
import type { HealthStatus } from '../../../src/status/remediation-status.js';

describe('JSON merge patches (RFC 7386)', () => {
  // The RFC's own examples (appendix A), as the apiserver applies them.
  const cases: [unknown, unknown, unknown][] = [
    [{ a: 'b' }, { a: 'c' }, { a: 'c' }],
    [{ a: 'b' }, { b: 'c' }, { a: 'b', b: 'c' }],
    [{ a: 'b' }, { a: null }, {}],
    [{ a: 'b', b: 'c' }, { a: null }, { b: 'c' }],
    [{ a: ['b'] }, { a: 'c' }, { a: 'c' }],
    [{ a: 'c' }, { a: ['b'] }, { a: ['b'] }],
    [{ a: { b: 'c' } }, { a: { b: 'd', c: null } }, { a: { b: 'd' } }],
    [{ a: [{ b: 'c' }] }, { a: [1] }, { a: [1] }],
    [{ e: null }, { a: 1 }, { e: null, a: 1 }],
    [[1, 2], { a: 'b', c: null }, { a: 'b' }],
    [{}, { a: { bb: { ccc: null } } }, { a: { bb: {} } }],
  ];
  for (const [target, patch, result] of cases)
    it(`applies ${JSON.stringify(patch)} to ${JSON.stringify(target)}`, () => {
      expect(applyMergePatch(target, patch)).to.deep.equal(result);
    });

  it('makes from the difference a patch that turns the stored value into the desired one, on the owned keys', () => {
    const json = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        fc.integer(),
        fc.string({ maxLength: 3 }),
        fc.array(fc.integer(), { maxLength: 2 }),
        tie('object'),
      ),
      object: fc.dictionary(fc.constantFrom('a', 'b', 'c'), tie('value'), { maxKeys: 3 }),
    }));
    const object = json.object;
    fc.assert(
      fc.property(object, object, (previous, desired) => {
        const patch = mergePatchFrom(previous, desired, ['a', 'b', 'c']);
        expect(applyMergePatch(previous, patch)).to.deep.equal(desired);
        // Nothing to write when nothing differs.
        expect(mergePatchFrom(desired, desired, ['a', 'b', 'c'])).to.deep.equal({});
      }),
      { numRuns: 300 },
    );
  });

  it('leaves keys it does not own alone, whatever they hold', () => {
    expect(mergePatchFrom({ a: 1, other: 'theirs' }, { a: 2 }, ['a'])).to.deep.equal({ a: 2 });
  });
});

describe('healthPatch', () => {
  const base = (): HealthStatus => ({
    policy: 'p',
    state: 'Remediating',
    stuckPodCount: 0,
    stuckPods: [],
    causes: [],
    ioEvidence: 'Inconclusive',
    conditions: [],
    actions: [],
    blocked: [],
  });
  const stored = (status: Partial<SandboxHealthStatus>): SandboxHealthStatus => ({ ...base(), ...status });
  const desired = (status: Partial<HealthStatus>): HealthStatus => ({ ...base(), ...status });
  const reading = { source: 'agent', observedTime: '2026-12-01T10:00:00Z', psiSomeAvg10Percent: 50 } as const;

  it('removes what the operator no longer says: a taint let go of, a runtime note, an IO tracking', () => {
    // Cordoned and tainted by us; someone else removed the taint, and we let go of it while still cordoned.
    const cordoned = {
      policy: 'p',
      since: '2026-12-01T10:00:00Z',
      cordoned: true,
      reason: 'x',
      dryRun: false,
    };
    const previous = stored({
      remediation: { ...cordoned, taint: 'k=v:NoSchedule' },
      runtime: { version: 'containerd://1.6.0', predatesMountFix: false, note: 'Has the mount fix' },
      ioPressure: { observation: 'Over', since: '2026-12-01T10:00:00Z' },
    });
    const patch = healthPatch(
      previous,
      desired({
        remediation: cordoned,
        runtime: { version: 'containerd://1.7.20', predatesMountFix: false },
      }),
    );
    expect(patch).to.deep.equal({
      remediation: { taint: null },
      runtime: { version: 'containerd://1.7.20', note: null },
      ioPressure: null,
    });
  });

  it("never removes the agent's ioReading, and writes a polled one the operator owns", () => {
    expect(healthPatch(stored({ ioReading: reading }), desired({}))).to.deep.equal({});
    const polled = { ...reading, source: 'prometheus', psiSomeAvg10Percent: 60 } as const;
    expect(healthPatch(stored({ ioReading: reading }), desired({ ioReading: polled }))).to.deep.equal({
      ioReading: { source: 'prometheus', psiSomeAvg10Percent: 60 },
    });
  });

  it('is empty when the stored status is the desired one (no write), and names each changed key alone', () => {
    const same = { runtime: { version: 'containerd://1.7.20', predatesMountFix: false } };
    expect(healthPatch(stored(same), desired(same))).to.deep.equal({});
    expect(healthPatch(stored(same), desired({ ...same, stuckPodCount: 2 }))).to.deep.equal({
      stuckPodCount: 2,
    });
  });
});
