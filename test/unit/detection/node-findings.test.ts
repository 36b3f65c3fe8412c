import { expect } from 'chai';
import {
  detectNodeFindings,
  detectStuckPods,
  indexFailureEvents,
  judgeEvidence,
  type FailureCause,
} from '../../../src/detection/index.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../support/builders.js';

const causes = (entries: [FailureCause | 'Unknown', number][]) => new Map(entries);

describe('judgeEvidence', () => {
  const table: { name: string; causes: [FailureCause | 'Unknown', number][]; evidence: string }[] = [
    { name: 'only NameReserved', causes: [['NameReserved', 3]], evidence: 'IoSuspected' },
    { name: 'only DeadlineExceeded', causes: [['DeadlineExceeded', 1]], evidence: 'IoSuspected' },
    {
      name: 'IO outnumbers Network',
      causes: [
        ['NameReserved', 2],
        ['Network', 1],
      ],
      evidence: 'IoSuspected',
    },
    {
      name: 'a tie goes to IO',
      causes: [
        ['DeadlineExceeded', 1],
        ['ImagePull', 1],
      ],
      evidence: 'IoSuspected',
    },
    {
      name: 'Network outnumbers IO',
      causes: [
        ['NameReserved', 1],
        ['Network', 2],
      ],
      evidence: 'NotIo',
    },
    { name: 'only Network', causes: [['Network', 4]], evidence: 'NotIo' },
    { name: 'only RuntimeHandler', causes: [['RuntimeHandler', 1]], evidence: 'NotIo' },
    {
      name: 'only unclassified',
      causes: [
        ['Other', 2],
        ['Unknown', 5],
      ],
      evidence: 'Inconclusive',
    },
    { name: 'nothing', causes: [], evidence: 'Inconclusive' },
  ];
  for (const row of table) {
    it(`says ${row.evidence} for ${row.name}`, () => {
      expect(judgeEvidence(causes(row.causes))).to.equal(row.evidence);
    });
  }
});

describe('detectNodeFindings', () => {
  const now = secondsAfter(T0, 600);
  const longest = aPod().named('longest').onNode('n1').waitingSince(T0).build();
  const shorter = aPod().named('shorter').onNode('n1').waitingSince(secondsAfter(T0, 200)).build();
  const network = aPod().named('cni').onNode('n2').waitingSince(T0).build();
  const unselected = aPod().named('elsewhere').onNode('n9').waitingSince(T0).build();
  const events = indexFailureEvents([
    anEvent().about(longest).saying(nameReservedMessage(longest)).build(),
    anEvent().about(shorter).build(),
    anEvent()
      .about(network)
      .saying('failed to setup network for sandbox "x": no IP addresses available')
      .build(),
  ]);
  const stuck = detectStuckPods([shorter, longest, network, unselected], events, {
    stuckThresholdSeconds: 60,
    now,
  });

  it('groups stuck pods by selected node, longest-waiting first, and counts causes', () => {
    const findings = detectNodeFindings(stuck, ['n1', 'n2', 'n3'], 1);
    const n1 = findings.get('n1')!;
    expect(n1.stuckPods.map((s) => s.pod.name)).to.deep.equal(['longest', 'shorter']);
    expect([...n1.causes]).to.have.deep.members([
      ['NameReserved', 1],
      ['DeadlineExceeded', 1],
    ]);
    expect(n1).to.include({ evidence: 'IoSuspected', degraded: true });
    expect(findings.get('n2')).to.include({ evidence: 'NotIo', degraded: true });
    expect(findings.get('n3')).to.include({ evidence: 'Inconclusive', degraded: false });
    expect(findings.has('n9')).to.equal(false);
  });

  it('needs minStuckPods before a node is degraded', () => {
    const findings = detectNodeFindings(stuck, ['n1', 'n2'], 2);
    expect(findings.get('n1')?.degraded).to.equal(true);
    expect(findings.get('n2')?.degraded).to.equal(false);
  });
});
