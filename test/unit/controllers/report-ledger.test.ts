import { expect } from 'chai';
import { MAX_RECORDED_ACTIONS } from '../../../src/api/v1alpha1/index.js';
import { ReportLedger } from '../../../src/controllers/report-ledger.js';
import type { ActionResult } from '../../../src/status/remediation-status.js';

const result = (n: number) =>
  ({ action: { kind: 'Cordon', reason: `r${n}` }, outcome: 'Succeeded' }) as unknown as ActionResult;

describe('ReportLedger', () => {
  it('keeps what a report did not hold, and counts the reports that landed', () => {
    const ledger = new ReportLedger();
    const [a, b, c] = [result(1), result(2), result(3)];
    ledger.add('n1', [a, b]);
    const look = { node: { name: 'n1' }, reportsLanded: ledger.landed('n1') };
    // A report planned with a and b lands; c came while it was in flight.
    ledger.add('n1', [c]);
    ledger.landedWith('n1', [a, b]);
    expect(ledger.untold('n1')).to.deep.equal([c]);
    expect(ledger.landed('n1')).to.equal(1);
    expect(ledger.stale(look), 'a look from before the report').to.equal(true);
    expect(ledger.stale({ ...look, reportsLanded: 1 })).to.equal(false);
    expect(ledger.untold('n2')).to.deep.equal([]);
  });

  it('keeps the latest MAX_RECORDED_ACTIONS of a node, and nothing of a node forgotten', () => {
    const ledger = new ReportLedger();
    const many = Array.from({ length: MAX_RECORDED_ACTIONS + 5 }, (_, i) => result(i));
    ledger.add('n1', many);
    expect(ledger.untold('n1')).to.deep.equal(many.slice(5));
    ledger.forget('n1');
    expect(ledger.untold('n1')).to.deep.equal([]);
    expect(ledger.landed('n1')).to.equal(0);
  });
});
