// The facts memo alone: a node's facts are made again only when something they depend on changed (its observation,
// the results no report holds yet, the dry run, an eviction in flight, its remediation), and reused otherwise.
import { expect } from 'chai';
import { PolicyMemory, type NodeObservation } from '../../../../src/controllers/policy-memory.js';
import { UnreportedResults } from '../../../../src/controllers/reporting/unreported.js';
import { factsOf } from '../../../../src/controllers/sandboxpolicy/facts.js';
import { detectNodeFindings, detectStuckPods, indexFailureEvents } from '../../../../src/detection/index.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import type { DetectionStatus } from '../../../../src/status/health-status.js';
import { T0 } from '../../../support/builders.js';
import { aNode } from '../../../support/memory-cluster.js';

const detection: DetectionStatus = {
  policy: 'p',
  state: 'Healthy',
  stuckPodCount: 0,
  stuckPods: [],
  causes: [],
  ioEvidence: 'Inconclusive',
  conditions: [],
};

function anObservation(): NodeObservation {
  const stuck = detectStuckPods([], indexFailureEvents([]), { stuckThresholdSeconds: 60, now: T0 });
  return {
    node: aNode('n1'),
    previous: undefined,
    exists: true,
    findings: detectNodeFindings(stuck, ['n1'], 1).get('n1')!,
    io: undefined,
    detection,
    ioHeavyPods: [],
    version: '1',
    dueAt: Infinity,
    reportsApplied: 0,
  };
}

function world() {
  const memory = new PolicyMemory('uid-p');
  const unreported = new UnreportedResults();
  const deps = {
    unreported,
    clock: new FakeClock(T0.getTime()),
    evictor: { lastEvictionOn: () => undefined },
  };
  const observation = anObservation();
  const facts = (o = observation, dryRun = false, inFlight: ReadonlySet<string> = new Set()) =>
    factsOf(deps, memory, o, dryRun, inFlight);
  return { memory, unreported, observation, facts };
}

const cordon = {
  kind: 'Cordon' as const,
  node: 'n1',
  target: 'node/n1',
  reason: 'SandboxCreationStuckOnIo',
  message: 'stuck',
};

describe('factsOf: the facts memo', () => {
  const cases: {
    name: string;
    change: (w: ReturnType<typeof world>) => ReturnType<typeof world>['facts'];
    again: boolean;
  }[] = [
    { name: 'reuses them while nothing changed', change: (w) => () => w.facts(), again: false },
    {
      name: 'makes them again for a new observation of the node',
      change: (w) => () => w.facts({ ...w.observation }),
      again: true,
    },
    { name: 'makes them again in a dry run', change: (w) => () => w.facts(w.observation, true), again: true },
    {
      name: 'makes them again once a result no report holds is added',
      change: (w) => {
        w.unreported.add('n1', [{ action: cordon, outcome: 'Succeeded' }]);
        return () => w.facts();
      },
      again: true,
    },
    {
      name: 'makes them again while an eviction is in flight, and keeps none of those',
      change: (w) => () => w.facts(w.observation, false, new Set(['uid-web'])),
      again: true,
    },
    {
      name: 'makes them again once the remediation dropped them',
      change: (w) => {
        delete w.memory.state('n1').facts;
        return () => w.facts();
      },
      again: true,
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      const w = world();
      const first = w.facts();
      const next = c.change(w)();
      expect(next !== first, 'made again').to.equal(c.again);
    });

  it('keeps no memo made while an eviction was in flight: the next pass makes them again', () => {
    const w = world();
    const during = w.facts(w.observation, false, new Set(['uid-web']));
    expect(w.memory.state('n1').facts).to.equal(undefined);
    expect(w.facts()).to.not.equal(during);
  });
});
