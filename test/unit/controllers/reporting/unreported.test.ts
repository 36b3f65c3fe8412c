import { expect } from 'chai';
import { MAX_RECORDED_ACTIONS } from '../../../../src/api/v1alpha1/index.js';
import { UnreportedResults } from '../../../../src/controllers/reporting/unreported.js';
import {
  actionRecord,
  DRY_RUN_PREFIX,
  remediationTransitions,
  type ActionResult,
  type HealthStatus,
  type RemediationStatusInput,
} from '../../../../src/status/remediation-status.js';

const result = (n: number) =>
  ({
    action: { kind: 'Cordon', reason: `r${n}`, message: 'cordoned', target: 'Node/n1' },
    outcome: 'Succeeded',
  }) as unknown as ActionResult;

describe('UnreportedResults', () => {
  it('keeps what a report did not hold, and when the last report applied', () => {
    const unreported = new UnreportedResults();
    const [a, b, c] = [result(1), result(2), result(3)];
    unreported.add('n1', [a, b]);
    const look = { node: { name: 'n1' }, reportsApplied: unreported.applied('n1') };
    // A report planned with a and b is applied; c came while it was in flight.
    unreported.add('n1', [c]);
    unreported.appliedWith('n1', [a, b]);
    expect(unreported.results('n1')).to.deep.equal([c]);
    expect(unreported.stale(look), 'a look from before the report').to.equal(true);
    expect(unreported.stale({ ...look, reportsApplied: unreported.applied('n1') })).to.equal(false);
    expect(unreported.results('n2')).to.deep.equal([]);
  });

  it('keeps the latest MAX_RECORDED_ACTIONS of a node, and nothing of a node forgotten', () => {
    const unreported = new UnreportedResults();
    const many = Array.from({ length: MAX_RECORDED_ACTIONS + 5 }, (_, i) => result(i));
    unreported.add('n1', many);
    expect(unreported.results('n1')).to.deep.equal(many.slice(5));
    unreported.appliedWith('n1', []);
    const look = { node: { name: 'n1' }, reportsApplied: unreported.applied('n1') };
    unreported.forget('n1');
    expect(unreported.results('n1')).to.deep.equal([]);
    // Made again under its name, its first applying is a moment no look of the old node holds.
    unreported.appliedWith('n1', []);
    expect(unreported.stale(look)).to.equal(true);
  });
});

describe('actionRecord', () => {
  it('says whether a dry run simulated the result, whichever policy tells it', () => {
    const now = new Date(0);
    const simulated = { ...result(1), simulated: true };
    const real = { ...result(2), simulated: false };
    expect(
      actionRecord(simulated, now, false).dryRun,
      "a dry-run namesake's, reported by a real policy",
    ).to.equal(true);
    expect(actionRecord(real, now, true).dryRun, "a real namesake's, reported by a dry run").to.equal(false);
    expect(actionRecord(result(3), now, true).dryRun, 'unmarked: the telling pass decides').to.equal(true);
  });

  it("words each result's Event as it was done, a dry run's with the prefix", () => {
    const simulated = { ...result(1), simulated: true };
    const real = { ...result(2), simulated: false };
    const input = (dryRun: boolean) =>
      ({
        node: { name: 'n1', uid: 'u1' },
        dryRun,
        results: [simulated, real],
        previous: undefined,
      }) as unknown as RemediationStatusInput;
    for (const dryRun of [false, true]) {
      const messages = remediationTransitions(input(dryRun), { blocked: [] } as unknown as HealthStatus).map(
        (t) => t.message,
      );
      // A real cordon says how a person takes the node over; a simulated one does not.
      expect(messages).to.deep.equal([
        `${DRY_RUN_PREFIX}cordoned`,
        'cordoned It is undone on recovery; to keep the node fenced for your own work, take it over: kubectl sandbox release n1.',
      ]);
    }
  });
});
