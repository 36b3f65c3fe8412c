import { expect } from 'chai';
import { diagnoseCluster } from '../../../src/diagnose/cluster.js';
import { diagnoseNode } from '../../../src/diagnose/node.js';
import { formatDiagnosis, MAX_TEXT_MESSAGE, table } from '../../../src/diagnose/text.js';
import { aNode, aPolicy, at, NOW, remediatingInput, remediatingStatus } from '../../support/diagnosis.js';

/** The lines of one section: from its heading to the next blank line. */
function sectionOf(text: string, heading: string): string[] {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.startsWith(heading));
  expect(start, `section ${heading} in:\n${text}`).to.be.greaterThan(-1);
  const end = lines.findIndex((l, i) => i > start && l === '');
  return lines.slice(start, end < 0 ? undefined : end);
}

describe('diagnose text', () => {
  it('aligns table columns and leaves the last unpadded', () => {
    expect(
      table([
        ['POD', 'CAUSE', 'X'],
        ['shop/web-1', 'NameReserved', 'a long last cell'],
      ]),
    ).to.deep.equal(['  POD         CAUSE         X', '  shop/web-1  NameReserved  a long last cell']);
  });

  describe('a node under remediation', () => {
    const text = formatDiagnosis(diagnoseNode(remediatingInput()));

    it('opens with the one-line summary and the time of the diagnosis', () => {
      const [first, policy, asOf] = text.split('\n');
      expect(first).to.equal(diagnoseNode(remediatingInput()).summary);
      expect(policy).to.equal('  policy p1 (valid)');
      expect(asOf).to.equal(`  as of ${NOW.toISOString()}`);
    });

    it('has a section for each question, in the order an SRE asks them', () => {
      const headings = text.split('\n').filter((l) => /^[A-Z]/.test(l));
      expect(headings.map((h) => h.split(/[ (:]/)[0])).to.deep.equal([
        'Stuck',
        'IO',
        'Processes',
        'Runtime',
        'What',
        'Next',
        'Blocking',
      ]);
    });

    it('tabulates the stuck pods with their wait, cause and latest Event, and names the reserved sandbox', () => {
      const lines = sectionOf(text, 'Stuck pods');
      expect(lines[0]).to.equal('Stuck pods (2): SandboxCreationDegraded=True StuckPodsAboveThreshold');
      expect(lines[1]).to.match(/^ {2}POD {9}WAITING {2}CAUSE {13}FAILURES {2}LATEST EVENT$/);
      expect(lines[2]).to.match(/^ {2}shop\/web-1 {2}10m00s {3}NameReserved {6}10\+ {7}x37, 2s ago$/);
      expect(lines[3]).to.match(/^ {2}shop\/web-2 {2}9m30s {4}DeadlineExceeded {2}2\+ {8}none found$/);
      expect(text).to.contain(
        '    reserved  web-1_shop_00000000-0000-4000-8000-0000000000a1_0 is held by a3f1c09e5b7d2…',
      );
      const containerd = formatDiagnosis(
        diagnoseNode(remediatingInput((i) => (i.health!.status!.stuckPods![0]!.runtime = 'containerd'))),
      );
      expect(sectionOf(containerd, 'Stuck pods')[2]).to.match(
        /^ {2}shop\/web-1 +10m00s +NameReserved \(containerd\) +10\+/,
      );
    });

    it('gives the IO evidence with its source and age, and marks the values over their thresholds', () => {
      const lines = sectionOf(text, 'IO evidence');
      expect(lines[0]).to.equal('IO evidence (agent, observed 5s ago)');
      expect(lines).to.include('  PSI some avg10  38.24%  (threshold 30%)  OVER');
      expect(lines).to.include('  PSI full avg10  12.5%  (threshold 20%)');
      expect(lines).to.include('  blocked tasks   14  (threshold 8)  OVER');
      expect(lines).to.include('  device sda      97.3% busy, 31 in flight, await 180.2 ms');
      expect(lines.find((l) => l.startsWith('  IoPressureHigh'))).to.match(
        /True ThresholdSustained \(7m50s ago\)/,
      );
    });

    it('lists D-state tasks runtime first under the kworker CPU', () => {
      const lines = sectionOf(text, 'Processes stuck in the kernel');
      expect(lines[1]).to.equal('  kworker CPU: 42.5% of a core');
      expect(lines[4]).to.match(/^ {4}5151 +runc:\[2:INIT\] +do_mount +yes$/);
    });

    it('says what the operator did: the cordon, the stamps, the actions and Events with their ages', () => {
      const lines = sectionOf(text, 'What the operator did');
      expect(lines[1]).to.equal('  node: cordoned by the operator');
      expect(lines).to.include('    sandbox.remediator.io/cordoned=true');
      expect(lines).to.include('    7m45s ago  Cordon  node/n1         Succeeded  SandboxCreationStuckOnIo');
      expect(lines.some((l) => /^ {4}7m40s ago +Normal +EvictedStuckPod +x1/.test(l))).to.equal(true);
    });

    it('says what comes next and that nothing blocks it', () => {
      expect(sectionOf(text, 'Next')[1]).to.equal('  Evict  evicts the 2 pod(s) still stuck on the node');
      expect(sectionOf(text, 'Blocking')).to.deep.equal(['Blocking', '  none']);
      expect(text).to.not.contain('Not read');
    });
  });

  it('marks a stale reading, shows when a step can happen, and what blocks since when', () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.health!.status!.ioReading!.observedTime = at(300);
        i.health!.status!.stuckPods = [];
        i.health!.status!.conditions = i.health!.status!.conditions!.map((c) =>
          c.type === 'IoPressureHigh'
            ? { ...c, status: 'False', reason: 'Recovered' }
            : c.type === 'SandboxCreationDegraded'
              ? { ...c, status: 'False', reason: 'NoStuckPods' }
              : c,
        );
        i.policy = aPolicy({ safety: { cooldownSeconds: 600 } });
        i.health!.status!.blocked = [
          { kind: 'Uncordon', target: 'node/n1', guard: 'Cooldown', message: 'not over', since: at(590) },
        ];
      }),
    );
    const text = formatDiagnosis(d);
    expect(text).to.contain('IO evidence (agent, observed 5m00s ago, STALE: older than 90s)');
    expect(sectionOf(text, 'Next')[1]).to.match(
      /^ {2}Uncordon {2}uncordons the node: .* \(not before .*, in 2m15s\)$/,
    );
    expect(sectionOf(text, 'Blocking')[1]).to.equal('  Cooldown  Uncordon node/n1: not over (since 10s ago)');
  });

  it('puts who does the IO first, the culprit named with its share, and says so in the headline', () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.health!.status!.ioCause = {
          cause: 'Pod',
          message: "shop/db-0 does 64% of sda's IO: the culprit is moved where migrateWorkloads allows it.",
          since: at(500),
          consumers: [
            {
              kind: 'Pod',
              podUid: 'u-1',
              namespace: 'shop',
              name: 'db-0',
              sharePercent: 64,
              role: 'Culprit',
            },
            {
              kind: 'Pod',
              podUid: 'u-2',
              namespace: 'shop',
              name: 'api-0',
              sharePercent: 3,
              role: 'Victim',
              psiSomeAvg10Percent: 61,
            },
            { kind: 'System', sharePercent: 33, role: 'System' },
          ],
        };
      }),
    );
    const text = formatDiagnosis(d);
    expect(text.split('\n')[0]).to.contain('culprit shop/db-0 (64% of the IO)');
    const lines = text.split('\n');
    expect(lines.findIndex((l) => l.startsWith('Who does the IO: Pod'))).to.be.lessThan(
      lines.findIndex((l) => l.startsWith('Stuck pods')),
    );
    expect(sectionOf(text, 'Who does the IO')).to.deep.equal([
      'Who does the IO: Pod',
      "  shop/db-0 does 64% of sda's IO: the culprit is moved where migrateWorkloads allows it.",
      '  shop/db-0                     64%  Culprit',
      '  shop/api-0                    3%   Victim   its own IO pressure 61%',
      '  the rest (system, writeback)  33%  System',
    ]);
  });

  it('cuts long messages to one line', () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.health!.status!.stuckPods![1]!.lastMessage = `line one\nline two ${'x'.repeat(1000)}`;
      }),
    );
    const message = formatDiagnosis(d)
      .split('\n')
      .find((l) => l.includes('line one'))!;
    expect(message).to.contain('line one line two');
    expect(message.trim().length).to.be.lessThan(MAX_TEXT_MESSAGE + 20);
    expect(message.endsWith('…')).to.equal(true);
  });

  it("shows no control character from a message: an escape sequence cannot rewrite the reader's terminal", () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.health!.status!.stuckPods![1]!.lastMessage = 'evil \u001b[2J\u001b]0;owned\u0007 \u009b31m end';
      }),
    );
    const text = formatDiagnosis(d);
    // eslint-disable-next-line no-control-regex
    expect(text).to.not.match(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(text).to.contain('evil \ufffd[2J\ufffd]0;owned\ufffd \ufffd31m end');
  });

  it('names the reads that failed', () => {
    const d = diagnoseNode(
      remediatingInput((i) => (i.unavailable = [{ what: 'list deployments', message: 'forbidden' }])),
    );
    expect(sectionOf(formatDiagnosis(d), 'Not read')).to.deep.equal([
      'Not read',
      '  list deployments: forbidden',
    ]);
  });

  it('tabulates the nodes that need attention, pointing at the worst', () => {
    const text = formatDiagnosis(
      diagnoseCluster({
        now: NOW,
        healths: [
          { name: 'n1', uid: 'u1', nodeName: 'n1', status: remediatingStatus() },
          { name: 'n2', uid: 'u2', nodeName: 'n2', status: { state: 'Healthy', conditions: [] } },
        ],
        nodes: [aNode('n1'), aNode('n2', {}, false), aNode('n3', {}, false)],
        policies: [aPolicy()],
        unavailable: [],
      }),
    );
    const lines = text.split('\n');
    expect(lines[0]).to.equal(
      '1 of 2 watched node(s) need attention; 1 node(s) without a SandboxHealth (no policy selects them)',
    );
    expect(lines[3]).to.match(/^ {2}NODE +STATE +STUCK +CORDONED +IO READING +LAST ACTION +WHY$/);
    expect(lines[4]).to.match(
      /^ {2}n1 +Remediating +2 +by operator +agent, 5s ago +Evict Succeeded, 7m40s ago +the operator is remediating it$/,
    );
    expect(text).to.contain('  Details: sandbox-remediator diagnose n1');
    expect(text).to.contain('Without a SandboxHealth: n3');
    expect(sectionOf(text, 'Policies')).to.deep.equal(['Policies', '  p1  valid']);
  });

  it('says all nodes are healthy in one line', () => {
    const text = formatDiagnosis(
      diagnoseCluster({
        now: NOW,
        healths: [{ name: 'n1', uid: 'u1', nodeName: 'n1', status: { state: 'Healthy', conditions: [] } }],
        nodes: [aNode('n1', {}, false)],
        policies: [],
        unavailable: [],
      }),
    );
    expect(text.split('\n')[0]).to.equal('all 1 nodes healthy');
    expect(text).to.not.contain('NODE');
  });
});

describe('diagnose text: IO limits', () => {
  it('lists each limit wanted with its rates and state, after who does the IO', () => {
    const input = remediatingInput((i) => {
      i.health!.ioLimits = [
        {
          podUid: 'u-db',
          pod: 'shop/db-0',
          device: '8:0',
          limit: { rbps: 1_048_576, wbps: 20_971_520, riops: 50, wiops: 300 },
          policy: 'p1',
          since: '2026-01-01T00:00:00Z',
          exhausted: true,
        },
      ];
    });
    const lines = sectionOf(formatDiagnosis(diagnoseNode(input)), 'IO limits');
    expect(lines[1]).to.match(
      /shop\/db-0\s+8:0\s+read 1048576 B\/s, 50 ops\/s\s+write 20971520 B\/s, 300 ops\/s\s+Pending, exhausted\s+since 2026-01-01T00:00:00Z/,
    );
  });

  it('has no such section when nothing is limited', () => {
    expect(formatDiagnosis(diagnoseNode(remediatingInput()))).to.not.contain('IO limits');
  });
});
