import { expect } from 'chai';
import { ReportsInFlight } from '../../../../src/controllers/reporting/in-flight.js';

const status = (stuckPodCount: number) => ({ stuckPodCount });

describe('ReportsInFlight', () => {
  it('names every write apart, and plans a report on the latest write not known to have applied', () => {
    const flights = new ReportsInFlight();
    const first = flights.fly('n1', status(1), []);
    expect(first.expected).to.deep.equal({ stuckPodCount: 1, reportId: first.id });
    expect(flights.latest('n1')).to.equal(first);
    expect(flights.mayFollow('n1')).to.equal(true);
    const second = flights.fly('n1', status(2), []);
    expect(second.id).to.not.equal(first.id);
    expect(flights.latest('n1')).to.equal(second);
    expect(flights.mayFollow('n1'), 'two open: a third waits').to.equal(false);
    expect(flights.latest('n2')).to.equal(undefined);
  });

  it('takes a applying to prove the writes it followed, and an older answer back later to stand for nothing', async () => {
    const flights = new ReportsInFlight();
    const reported = [{ kind: 'Cordon' }] as never[];
    const first = flights.fly('n1', status(1), reported);
    const second = flights.fly('n1', status(2), []);
    expect(flights.back('n1', second, true)).to.deep.equal({ applied: true, latest: true, proven: [first] });
    expect(flights.latest('n1'), 'nothing open: the next goes unfenced').to.equal(undefined);
    expect(flights.mayFollow('n1')).to.equal(true);
    // The first's answer: a timeout, and yet it applied.
    expect(flights.back('n1', first, false)).to.deep.equal({ applied: true, latest: false, proven: [] });
    expect(await first.outcome).to.equal(true);
    expect(await second.outcome).to.equal(true);
  });

  it('gives a failed write that a later one proves nothing, and a refused one nothing to follow until none flies', async () => {
    const flights = new ReportsInFlight();
    const first = flights.fly('n1', status(1), []);
    const second = flights.fly('n1', status(2), []);
    expect(flights.follower('n1', first)).to.equal(second);
    expect(flights.back('n1', second, false)).to.deep.equal({ applied: false, latest: false, proven: [] });
    expect(await second.outcome).to.equal(false);
    flights.refuse('n1');
    expect(flights.mayFollow('n1')).to.equal(false);
    expect(flights.back('n1', first, true).latest).to.equal(true);
    expect(flights.lookAgain('n1'), 'asked once').to.equal(true);
    expect(flights.lookAgain('n1')).to.equal(false);
    expect(flights.mayFollow('n1')).to.equal(true);
  });
});
