import { expect } from 'chai';
import type { NodeDiagnosisInput } from '../../../src/diagnose/inputs.js';
import { diagnoseNode } from '../../../src/diagnose/node.js';
import { aNode, aPolicy, at, condition, remediatingInput } from '../../support/diagnosis.js';

/** n1 before anything was done: no stamps, not cordoned, no actions. */
function untouched(i: NodeDiagnosisInput): void {
  i.node = aNode('n1', {}, false);
  const status = i.health!.status!;
  delete status.remediation;
  delete status.lastAction;
  status.actions = [];
  status.conditions = status.conditions!.map((c) =>
    c.type === 'Cordoned' ? condition('Cordoned', 'False', 'NotCordoned', 'Not cordoned.') : c,
  );
}

const setCondition = (i: NodeDiagnosisInput, c: ReturnType<typeof condition>) => {
  const status = i.health!.status!;
  status.conditions = [...status.conditions!.filter((x) => x.type !== c.type), c];
};

/** Degraded, IO over threshold since at(590) but not for sustainSeconds (30) yet. */
function degradedRising(i: NodeDiagnosisInput): void {
  untouched(i);
  const status = i.health!.status!;
  status.state = 'Degraded';
  status.ioPressure = { observation: 'Over', since: at(590) };
  setCondition(i, condition('IoPressureHigh', 'False', 'ThresholdNotSustained', 'Over threshold since ...'));
  setCondition(
    i,
    condition(
      'Cordoned',
      'False',
      'IoPressureNotVerified',
      'Pods are stuck from an IO cause, but IO pressure is not sustained (Rising)',
    ),
  );
}

function recovering(i: NodeDiagnosisInput): void {
  const status = i.health!.status!;
  status.state = 'Recovering';
  status.stuckPodCount = 0;
  status.stuckPods = [];
  status.ioPressure = { observation: 'Under', since: at(550) };
  setCondition(i, condition('IoPressureHigh', 'True', 'RecoveryPending', 'Below every threshold since ...'));
}

interface Case {
  name: string;
  change: (i: NodeDiagnosisInput) => void;
  actions: string[];
  text: RegExp;
  notBefore?: string;
}

const cases: Case[] = [
  {
    name: 'Healthy with nothing done: nothing',
    change: (i) => {
      untouched(i);
      i.health!.status!.state = 'Healthy';
    },
    actions: ['Nothing'],
    text: /^nothing: no pod is stuck/,
  },
  {
    name: 'Degraded, IO over but not yet sustained: waits for IO evidence, until since + sustainSeconds',
    change: degradedRising,
    actions: ['Wait'],
    text: /^waits for IO evidence: cordons when IoPressureHigh holds sustainSeconds \(30s\); IoPressureHigh is False \(ThresholdNotSustained\)/,
    notBefore: at(620),
  },
  {
    name: 'Degraded with no verified reading: waits for IO evidence, no time',
    change: (i) => {
      degradedRising(i);
      i.health!.status!.ioPressure = { observation: 'Unknown', since: at(500) };
      setCondition(i, condition('IoPressureHigh', 'Unknown', 'SourceUnavailable', 'no reading'));
    },
    actions: ['Wait'],
    text: /IoPressureHigh is Unknown \(SourceUnavailable\)/,
  },
  {
    name: 'Degraded from a cause that is not IO: nothing',
    change: (i) => {
      degradedRising(i);
      i.health!.status!.ioEvidence = 'NotIo';
      setCondition(i, condition('Cordoned', 'False', 'NotIoCaused', 'not IO'));
    },
    actions: ['Nothing'],
    text: /do not point at disk IO/,
  },
  {
    name: 'Degraded before any failure message: waits for the messages',
    change: (i) => {
      degradedRising(i);
      i.health!.status!.ioEvidence = 'Inconclusive';
    },
    actions: ['Wait'],
    text: /failure messages/,
  },
  {
    name: 'Degraded under a policy that does not require IO pressure: cordon, then evict',
    change: (i) => {
      degradedRising(i);
      i.policy = aPolicy({ remediation: { requireIoPressure: false } });
    },
    actions: ['Cordon', 'Evict'],
    text: /^cordons the node$/,
  },
  {
    name: 'IoPressure, nothing done yet: cordon, then evict the stuck pods',
    change: (i) => {
      untouched(i);
      i.health!.status!.state = 'IoPressure';
    },
    actions: ['Cordon', 'Evict'],
    text: /^cordons the node$/,
  },
  {
    name: 'IoPressure with a taint and no cordon in the policy: taint, then evict',
    change: (i) => {
      untouched(i);
      i.health!.status!.state = 'IoPressure';
      i.policy = aPolicy({ remediation: { cordon: false, taint: { key: 'sandbox.remediator.io/io' } } });
    },
    actions: ['Taint', 'Evict'],
    text: /^taints it sandbox\.remediator\.io\/io=true:NoSchedule$/,
  },
  {
    name: 'IoPressure held by a guard: says so first',
    change: (i) => {
      untouched(i);
      const status = i.health!.status!;
      status.state = 'IoPressure';
      status.blocked = [
        {
          kind: 'Cordon',
          target: 'node/n1',
          guard: 'MinSchedulableNodes',
          message: 'too few left',
          since: at(590),
        },
      ];
    },
    actions: ['Wait', 'Cordon', 'Evict'],
    text: /^held by a guard first/,
  },
  {
    name: 'Remediating while IO is high with pods still stuck: evict them, keep cordoned',
    change: () => undefined,
    actions: ['Evict', 'Wait'],
    text: /^evicts the 2 pod\(s\) still stuck/,
  },
  {
    name: 'Remediating while IO is high, one stuck pod held by a guard: evicts the other only',
    change: (i) => {
      i.health!.status!.blocked = [
        {
          kind: 'Evict',
          target: 'pod/shop/web-2',
          guard: 'NoController',
          message: 'a bare pod',
          since: at(140),
        },
      ];
    },
    actions: ['Evict', 'Wait'],
    text: /^evicts the 1 pod\(s\) still stuck on the node \(1 more held by a guard\)$/,
  },
  {
    name: 'Remediating while IO is high, every stuck pod held by a guard: keep cordoned',
    change: (i) => {
      i.health!.status!.blocked = ['web-1', 'web-2'].map((name) => ({
        kind: 'Evict' as const,
        target: `pod/shop/${name}`,
        guard: 'NoController',
        message: 'a bare pod',
        since: at(140),
      }));
    },
    actions: ['Wait'],
    text: /^keeps the node cordoned while IoPressureHigh holds/,
  },
  {
    name: 'Remediating while IO is high, no pod stuck: keep cordoned',
    change: (i) => {
      i.health!.status!.stuckPods = [];
    },
    actions: ['Wait'],
    text: /^keeps the node cordoned while IoPressureHigh holds; undoes it after recoverySeconds \(2m00s\)/,
  },
  {
    name: 'Remediating on unknown readings: keeps the node as it is',
    change: (i) => {
      setCondition(
        i,
        condition('IoPressureHigh', 'True', 'ReadingUnknown', 'unknown. Last known: over threshold.'),
      );
    },
    actions: ['Wait'],
    text: /IO readings are unknown \(ReadingUnknown\)/,
  },
  {
    name: 'Recovering with our cordon: uncordon after recoverySeconds and the cooldown, whichever ends later',
    change: recovering,
    actions: ['Uncordon'],
    text: /^uncordons the node once readings stay under every threshold for recoverySeconds \(2m00s\)/,
    // recovery ends at 550 + 120 = 670; the cooldown at 135 + 300 = 435
    notBefore: at(670),
  },
  {
    name: 'Recovering, the cooldown ending last',
    change: (i) => {
      recovering(i);
      i.policy = aPolicy({ safety: { cooldownSeconds: 900 } });
    },
    actions: ['Uncordon'],
    text: /cooldownSeconds \(15m00s\)/,
    notBefore: at(1035),
  },
  {
    name: 'Recovering under undoOnRecovery false: leaves it',
    change: (i) => {
      recovering(i);
      i.policy = aPolicy({ remediation: { undoOnRecovery: false } });
    },
    actions: ['Nothing'],
    text: /undoOnRecovery is false/,
  },
  {
    name: 'Recovering with nothing of ours on the node: nothing to undo',
    change: (i) => {
      recovering(i);
      untouched(i);
    },
    actions: ['Nothing'],
    text: /^nothing to undo here/,
  },
  {
    name: 'Remediating, IO recovered, no pod stuck: uncordon (the cooldown over: now)',
    change: (i) => {
      i.health!.status!.stuckPods = [];
      setCondition(i, condition('IoPressureHigh', 'False', 'Recovered', 'Below every threshold'));
    },
    actions: ['Uncordon'],
    text: /^uncordons the node: IO pressure is gone, after cooldownSeconds \(5m00s\)/,
    notBefore: at(600),
  },
  {
    name: 'Remediating, IO low but pods still stuck from IO: keeps cordoned',
    change: (i) => {
      setCondition(i, condition('IoPressureHigh', 'False', 'Recovered', 'Below every threshold'));
    },
    actions: ['Wait'],
    text: /until no pod is stuck from IO \(2 still are\)/,
  },
  {
    name: 'state Unknown: unknown',
    change: (i) => {
      untouched(i);
      i.health!.status!.state = 'Unknown';
    },
    actions: ['Unknown'],
    text: /status does not say \(state Unknown\)/,
  },
  {
    name: 'an invalid policy: nothing until it is valid',
    change: (i) => {
      i.policy = aPolicy(
        {},
        {
          conditions: [condition('Valid', 'False', 'InvalidSpec', '1 problem(s)')],
          problems: [{ field: 'spec.safety.cooldownSeconds', message: 'Too big' }],
        },
      );
    },
    actions: ['Nothing'],
    text: /^nothing until policy p1 is valid/,
  },
  {
    name: 'a paused policy: nothing',
    change: (i) => {
      i.policy = aPolicy({ safety: { paused: true } });
    },
    actions: ['Nothing'],
    text: /spec\.safety\.paused is true/,
  },
  {
    name: 'the owning policy gone: unknown',
    change: (i) => {
      delete i.policy;
    },
    actions: ['Unknown'],
    text: /the owning policy p1 does not exist/,
  },
  {
    name: 'a dry run: says that nothing changes',
    change: (i) => {
      untouched(i);
      i.health!.status!.state = 'IoPressure';
      i.policy = aPolicy({ safety: { dryRun: true } });
    },
    actions: ['Cordon', 'Evict'],
    text: /^dry run, changes nothing: cordons the node$/,
  },
];

describe('diagnose: what the operator does next', () => {
  for (const c of cases) {
    it(c.name, () => {
      const next = diagnoseNode(remediatingInput(c.change)).next;
      expect(next.map((n) => n.action)).to.deep.equal(c.actions);
      expect(next[0]!.text).to.match(c.text);
      expect(next[0]!.notBefore).to.equal(c.notBefore);
    });
  }
});

describe('diagnose: what blocks the operator', () => {
  const blockers = (change: (i: NodeDiagnosisInput) => void) =>
    diagnoseNode(remediatingInput(change)).blocking.map((b) => [b.source, b.name]);

  it('nothing on a node being remediated as it should be', () => {
    expect(blockers(() => undefined)).to.deep.equal([]);
  });

  it('the guards in status.blocked, with what they hold and since when', () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.health!.status!.blocked = [
          {
            kind: 'Uncordon',
            target: 'node/n1',
            guard: 'Cooldown',
            message: 'cooldownSeconds 300 not over',
            since: at(580),
          },
        ];
      }),
    );
    expect(d.blocking).to.deep.equal([
      {
        source: 'Guard',
        name: 'Cooldown',
        message: 'Uncordon node/n1: cooldownSeconds 300 not over',
        since: at(580),
      },
    ]);
  });

  it('the conditions that say why a degraded node is not acted on', () => {
    expect(blockers(degradedRising)).to.deep.equal([
      ['Condition', 'IoPressureNotVerified'],
      ['Condition', 'ThresholdNotSustained'],
    ]);
  });

  it('a cordon by someone else, and unknown readings on a node of ours', () => {
    expect(
      blockers((i) => {
        setCondition(i, condition('Cordoned', 'False', 'CordonedByOthers', 'not by this operator'));
        setCondition(i, condition('IoPressureHigh', 'True', 'SourceUnavailable', 'unknown'));
      }),
    ).to.deep.equal([
      ['Condition', 'CordonedByOthers'],
      ['Condition', 'SourceUnavailable'],
    ]);
  });

  it('the policy: every validation problem, paused, dry run, storm, or missing', () => {
    expect(
      blockers((i) => {
        i.policy = aPolicy(
          {},
          {
            conditions: [condition('Valid', 'False', 'InvalidSpec', '2 problem(s)')],
            problems: [
              { field: 'spec.safety.cooldownSeconds', message: 'Too big' },
              { field: 'spec.nodeSelector', message: 'bad' },
            ],
          },
        );
      }),
    ).to.deep.equal([
      ['Policy', 'InvalidSpec'],
      ['Policy', 'InvalidSpec'],
    ]);
    expect(
      blockers((i) => {
        i.policy = aPolicy(
          { safety: { paused: true, dryRun: true } },
          {
            conditions: [condition('StormDetected', 'True', 'StormLimitReached', '3 unhealthy')],
          },
        );
      }),
    ).to.deep.equal([
      ['Policy', 'Paused'],
      ['Policy', 'DryRun'],
      ['Policy', 'StormLimitReached'],
    ]);
    expect(blockers((i) => delete i.policy)).to.deep.equal([['Policy', 'PolicyMissing']]);
  });

  it('a Valid=False condition without a problem list still says why', () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.policy = aPolicy(
          {},
          { conditions: [condition('Valid', 'False', 'InvalidSpec', 'spec.x: unknown field')] },
        );
      }),
    );
    expect(d.blocking[0]!.message).to.equal('SandboxPolicy p1 spec: spec.x: unknown field');
  });

  it("the policy's own validation when the operator has not judged it yet", () => {
    const d = diagnoseNode(
      remediatingInput((i) => {
        i.policy = aPolicy({ safety: { cooldownSeconds: -1 } }, { conditions: [] });
      }),
    );
    expect(d.policy).to.include({ valid: false });
    expect(d.blocking.map((b) => b.message)).to.deep.equal([
      'SandboxPolicy p1 spec.safety.cooldownSeconds: Too small: expected number to be >=0',
    ]);
  });
});
