// The uninstall's plan: only what our stamps record is undone, exactly as the orphan sweep undoes it; what anyone else
// did stays and is named with the reason; every step carries the version it was planned on.
import { expect } from 'chai';
import fc from 'fast-check';
import { NODE_CONDITION_TYPE, PACING_GATE, STAMP, type Taint } from '../../../src/api/v1alpha1/index.js';
import { planCleanup, planNode, type CleanupInput, type CleanupStep } from '../../../src/cleanup/plan.js';
import { nodeChange } from '../../../src/actuation/node-change.js';
import { undoActions } from '../../../src/policy/actions.js';
import {
  aDeployment,
  aGatedPod,
  aHeldStatefulSet,
  aNode,
  aNodeLease,
  applyNodeChange,
} from '../../support/cleanup-objects.js';

const OUR_TAINT: Taint = { key: 'sandbox.remediator.io/io-saturated', effect: 'NoSchedule' };
const FOREIGN_TAINT = {
  key: 'example.com/maintenance',
  value: 'yes',
  effect: 'NoExecute',
  timeAdded: '2026-12-01T09:00:00Z',
};
const ALL_STAMPS_REMOVED = Object.fromEntries(Object.values(STAMP).map((k) => [k, null]));

const empty: CleanupInput = {
  nodes: [],
  workloads: [],
  gatedPods: [],
  leases: [],
  nodesListed: true,
  healths: [],
  policies: [],
  keepHealth: false,
};
const stepOf = <K extends CleanupStep['kind']>(steps: CleanupStep[], kind: K) =>
  steps.find((s): s is Extract<CleanupStep, { kind: K }> => s.kind === kind);

describe('planCleanup', () => {
  describe('a node', () => {
    it('that we cordoned and tainted: both undone, a taint of another kept exactly, our stamps removed, on the listed version', () => {
      const node = aNode('n1')
        .cordoned()
        .tainted(FOREIGN_TAINT)
        .tainted(OUR_TAINT)
        .stampedBy('p', { cordoned: true, taint: OUR_TAINT })
        .atVersion('41')
        .build();
      const { step, leftAlone } = planNode(node);
      expect(step?.kind).to.equal('ReleaseNode');
      if (step?.kind !== 'ReleaseNode') return;
      expect(step.change).to.deep.equal({
        node: 'n1',
        resourceVersion: '41',
        unschedulable: false,
        taints: [FOREIGN_TAINT],
        annotations: ALL_STAMPS_REMOVED,
      });
      expect(step.changes).to.deep.equal([
        'taint sandbox.remediator.io/io-saturated=:NoSchedule removed',
        'uncordoned',
        'stamps of policy p removed',
      ]);
      expect(leftAlone).to.deep.equal([]);
    });

    it("is undone by the operator's own undo: the same change the orphan sweep makes", () => {
      const node = aNode('n1')
        .cordoned()
        .tainted(OUR_TAINT)
        .stampedBy('p', { cordoned: true, taint: OUR_TAINT })
        .build();
      const { step } = planNode(node);
      const sweep = nodeChange(
        node.view,
        undoActions('n1', node.view.stamps!, 'PolicyGone', ''),
        undefined,
        '100',
      );
      expect(step?.kind === 'ReleaseNode' && step.change).to.deep.equal(sweep);
    });

    const cases: {
      name: string;
      node: () => ReturnType<typeof aNode>;
      change: object;
      changes: string[];
      left: string[];
    }[] = [
      {
        name: 'cordoned by someone else, with no stamp of ours: untouched, and said',
        node: () => aNode('n1').cordoned().tainted(FOREIGN_TAINT),
        change: {},
        changes: [],
        left: ['cordoned, with no stamp of ours'],
      },
      {
        name: 'tainted with our key but no stamp: untouched (it may be a hand-made copy)',
        node: () => aNode('n1').tainted(OUR_TAINT),
        change: {},
        changes: [],
        left: [
          'taint sandbox.remediator.io/io-saturated=:NoSchedule has our key but no stamp of ours records it (remove it by hand if you know it is ours)',
        ],
      },
      {
        name: 'that someone uncordoned after us: only our stamps go',
        node: () => aNode('n1').stampedBy('p', { cordoned: true }),
        change: { annotations: ALL_STAMPS_REMOVED },
        changes: ['already uncordoned by someone else', 'stamps of policy p removed'],
        left: [],
      },
      {
        name: 'whose taint of ours someone removed: the taint list is not written',
        node: () => aNode('n1').cordoned().stampedBy('p', { cordoned: true, taint: OUR_TAINT }),
        change: { unschedulable: false, annotations: ALL_STAMPS_REMOVED },
        changes: [
          'taint sandbox.remediator.io/io-saturated=:NoSchedule already removed by someone else',
          'uncordoned',
          'stamps of policy p removed',
        ],
        left: [],
      },
      {
        name: 'that we only tainted, cordoned by someone else: the cordon stays',
        node: () => aNode('n1').cordoned().tainted(OUR_TAINT).stampedBy('p', { taint: OUR_TAINT }),
        change: { taints: [], annotations: ALL_STAMPS_REMOVED },
        changes: [
          'taint sandbox.remediator.io/io-saturated=:NoSchedule removed',
          'stamps of policy p removed',
        ],
        left: ['left cordoned: our stamps record no cordon (someone else cordoned it)'],
      },
      {
        name: 'whose taint of our key now has another effect: that taint is not ours as it stands, and stays',
        node: () =>
          aNode('n1')
            .tainted({ ...OUR_TAINT, effect: 'NoExecute' })
            .stampedBy('p', { taint: OUR_TAINT }),
        change: { annotations: ALL_STAMPS_REMOVED },
        changes: ['stamps of policy p removed'],
        left: [
          'taint sandbox.remediator.io/io-saturated differs from the sandbox.remediator.io/io-saturated=:NoSchedule our stamps record: not ours as it stands',
        ],
      },
    ];
    for (const c of cases)
      it(c.name, () => {
        const { step, leftAlone } = planNode(c.node().build());
        if (c.changes.length === 0) expect(step).to.equal(undefined);
        else {
          expect(step?.kind).to.equal('ReleaseNode');
          if (step?.kind !== 'ReleaseNode') return;
          expect(step.change).to.deep.equal({ node: 'n1', resourceVersion: '100', ...c.change });
          expect(step.changes).to.deep.equal(c.changes);
        }
        expect(leftAlone.map((l) => l.why)).to.deep.equal(c.left);
        expect(leftAlone.every((l) => l.target === 'node/n1')).to.equal(true);
      });

    it('property: never removes a taint our stamps do not record, nor uncordons unless they record a cordon; once applied, nothing of ours is left', () => {
      const taint = fc.record(
        {
          key: fc.constantFrom(
            'sandbox.remediator.io/io-saturated',
            'example.com/a',
            'sandbox.remediator.io/other',
          ),
          value: fc.constantFrom('x', 'y'),
          effect: fc.constantFrom('NoSchedule', 'NoExecute', 'PreferNoSchedule'),
        },
        { requiredKeys: ['key', 'effect'] },
      );
      fc.assert(
        fc.property(
          fc.boolean(),
          fc.uniqueArray(taint, { selector: (t) => `${t.key}=${t.value ?? ''}:${t.effect}`, maxLength: 4 }),
          fc.option(fc.record({ cordoned: fc.boolean(), taint: fc.option(taint, { nil: undefined }) }), {
            nil: undefined,
          }),
          (cordoned, taints, stamps) => {
            const builder = aNode('n1');
            if (cordoned) builder.cordoned();
            for (const t of taints) builder.tainted(t);
            if (stamps) builder.stampedBy('p', stamps);
            const node = builder.build();
            const { step } = planNode(node);
            if (!stamps) return step === undefined;
            if (step?.kind !== 'ReleaseNode') return false;
            const { change } = step;
            if (change.unschedulable === false && !stamps.cordoned) return false;
            if (change.unschedulable === true) return false;
            const removed = node.view.taints.filter((t) => !(change.taints ?? node.view.taints).includes(t));
            const ours = (t: Taint) =>
              stamps.taint !== undefined &&
              t.key === stamps.taint.key &&
              (t.value ?? '') === (stamps.taint.value ?? '') &&
              t.effect === stamps.taint.effect;
            if (!removed.every(ours)) return false;
            // Applied, the node carries no stamp, so a second cleanup finds nothing of ours to do on it.
            const after = applyNodeChange(builder.raw(), change, '101');
            return after.view.stamps === undefined && planNode(after).step === undefined;
          },
        ),
      );
    });
  });

  it('clears our Node condition on the version listed, and no condition of another type', () => {
    const plan = planCleanup({
      ...empty,
      nodes: [
        aNode('n1').withOurCondition('True', 'RemediationExhausted').atVersion('8').build(),
        aNode('n2').withCondition('IoPressure', 'True', 'PsiHigh').build(),
      ],
    });
    expect(plan.steps).to.deep.equal([
      {
        kind: 'RemoveNodeCondition',
        target: 'node/n1',
        node: 'n1',
        version: '8',
        changes: [`condition ${NODE_CONDITION_TYPE}=True (RemediationExhausted) removed`],
      },
    ]);
    expect(plan.leftAlone).to.deep.equal([]);
  });

  it('leaves a condition of our type with a reason the operator never writes, named', () => {
    const plan = planCleanup({
      ...empty,
      nodes: [aNode('n1').withOurCondition('True', 'SetByHand').build()],
    });
    expect(plan.steps).to.deep.equal([]);
    expect(plan.leftAlone).to.deep.equal([
      {
        target: 'node/n1',
        why: `condition ${NODE_CONDITION_TYPE} with reason SetByHand: not one the operator writes`,
      },
    ]);
  });

  it("deletes our node leases, expired or not, on their uid and version; another's is left, named", () => {
    const now = new Date('2026-12-01T12:00:00Z');
    const plan = planCleanup({
      ...empty,
      leases: [
        aNodeLease('n1', 'sandbox-remediator-p', { version: '31', now }),
        aNodeLease('n2', 'sandbox-remediator-q', { now, renewedAgoSeconds: 3600 }),
        aNodeLease('n3', 'NodeHealthCheck', { now }),
      ],
    });
    expect(
      plan.steps.map((s) => [s.kind, s.target, s.kind === 'DeleteLease' && s.version, s.changes]),
    ).to.deep.equal([
      ['DeleteLease', 'lease/medik8s-leases/node-n1', '31', ['deleted (holder sandbox-remediator-p)']],
      ['DeleteLease', 'lease/medik8s-leases/node-n2', '3', ['deleted (holder sandbox-remediator-q)']],
    ]);
    expect(stepOf(plan.steps, 'DeleteLease')?.lease).to.include({ node: 'n1', uid: 'lease-n1' });
    expect(plan.leftAlone).to.deep.equal([
      { target: 'lease/medik8s-leases/node-n3', why: 'held by NodeHealthCheck, not by us' },
    ]);
  });

  it('lifts our pacing gate on the version listed, naming the gates of others it keeps', () => {
    const plan = planCleanup({
      ...empty,
      gatedPods: [aGatedPod('web-1', ['example.com/quota', PACING_GATE], 'p', '12')],
    });
    const step = stepOf(plan.steps, 'ReleaseGate');
    expect(step).to.include({ target: 'pod/shop/web-1', version: '12' });
    expect(step?.pod.gates).to.deep.equal(['example.com/quota', PACING_GATE]);
    expect(step?.changes).to.deep.equal([`scheduling gate ${PACING_GATE} lifted (set for policy p)`]);
    expect(plan.leftAlone).to.deep.equal([
      { target: 'pod/shop/web-1', why: 'scheduling gates example.com/quota are not ours' },
    ]);
  });

  describe('a rollout', () => {
    it('we paused: resumed as the operator resumes it, with our annotations removed, on its version', () => {
      const plan = planCleanup({
        ...empty,
        workloads: [aDeployment('web', { paused: true, pausedBy: 'p', version: '70' })],
      });
      const step = stepOf(plan.steps, 'ReleaseRollout');
      expect(step?.change).to.deep.include({
        kind: 'Deployment',
        namespace: 'shop',
        name: 'web',
        resourceVersion: '70',
      });
      expect(step?.change.spec).to.deep.equal({ paused: null });
      expect(step?.change.annotations).to.include({
        'sandbox.remediator.io/paused-by': null,
        'sandbox.remediator.io/held-update-strategy': null,
      });
      expect(step?.changes).to.deep.equal(['spec.paused reset', 'stamps of policy p removed']);
    });

    it('its owner paused: untouched, and said', () => {
      const plan = planCleanup({ ...empty, workloads: [aDeployment('web', { paused: true })] });
      expect(plan.steps).to.deep.equal([]);
      expect(plan.leftAlone).to.deep.equal([
        { target: 'deployment/shop/web', why: 'held by its owner (spec.paused), not by us' },
      ]);
    });

    it('that its owner resumed after us: only our stamps go, spec untouched', () => {
      const plan = planCleanup({ ...empty, workloads: [aDeployment('web', { pausedBy: 'p' })] });
      const step = stepOf(plan.steps, 'ReleaseRollout');
      expect(step?.change.spec).to.equal(undefined);
      expect(step?.changes).to.deep.equal(['already released by its owner', 'stamps of policy p removed']);
    });

    it('a StatefulSet we hold: its partition put back as the record says', () => {
      const held = '{"type":"RollingUpdate","rollingUpdate":{"partition":1}}';
      const plan = planCleanup({ ...empty, workloads: [aHeldStatefulSet('db', 'p', held)] });
      const step = stepOf(plan.steps, 'ReleaseRollout');
      expect(step?.change.spec).to.deep.equal({ updateStrategy: { rollingUpdate: { partition: 1 } } });
      expect(step?.changes).to.deep.equal(['partition 1 put back as it was', 'stamps of policy p removed']);
    });

    it('a StatefulSet we hold whose record of the strategy is gone: our stamps go as the operator lets it go, its strategy is not guessed at', () => {
      const plan = planCleanup({ ...empty, workloads: [aHeldStatefulSet('db', 'p', undefined)] });
      const step = stepOf(plan.steps, 'ReleaseRollout');
      expect(step?.change.spec).to.equal(undefined);
      expect(step?.change.annotations).to.include({ 'sandbox.remediator.io/paused-by': null });
      expect(step?.changes).to.deep.equal(['spec.updateStrategy not changed', 'stamps of policy p removed']);
      expect(plan.leftAlone.map((l) => l.why)).to.deep.equal([
        'spec.updateStrategy stays as it is: the record of what our hold replaced (sandbox.remediator.io/held-update-strategy) is missing or unreadable; check it by hand',
      ]);
    });

    it('carrying only our hands-off mark: the mark removed, nothing else', () => {
      const mark = { 'sandbox.remediator.io/hands-off-until': '2026-12-01T11:00:00Z' };
      const plan = planCleanup({ ...empty, workloads: [aDeployment('web', { annotations: mark })] });
      const step = stepOf(plan.steps, 'ReleaseRollout');
      expect(step?.change).to.deep.equal({
        kind: 'Deployment',
        namespace: 'shop',
        name: 'web',
        resourceVersion: '7',
        annotations: { 'sandbox.remediator.io/hands-off-until': null },
      });
    });
  });

  it('deletes every SandboxHealth on its version, or keeps them all with --keep-health; policies are named, never touched', () => {
    const input = { ...empty, healths: [{ view: { name: 'n1' }, version: '4' }], policies: ['p'] };
    const policyLine = {
      target: 'sandboxpolicy/p',
      why: "yours, not the operator's: it goes with the CRDs (kubectl delete -f crds/)",
    };
    expect(planCleanup(input)).to.deep.equal({
      steps: [
        {
          kind: 'DeleteHealth',
          target: 'sandboxhealth/n1',
          name: 'n1',
          version: '4',
          awaitLift: false,
          nodeGone: true,
          pods: {},
          changes: ['deleted'],
        },
      ],
      leftAlone: [policyLine],
    });
    expect(planCleanup({ ...input, keepHealth: true })).to.deep.equal({
      steps: [],
      leftAlone: [{ target: 'sandboxhealth/n1', why: 'kept (--keep-health)' }, policyLine],
    });
  });

  it('lifts the IO limits a node wants, and deletes its SandboxHealth only after its agent reports them lifted', () => {
    const limit = { podUid: 'u1', device: '8:0', pod: 'data/db-0', policy: 'p' };
    const wanted = [limit, { ...limit, device: '8:16' }] as never[];
    const table: [string, { ioLimits?: never[]; applied?: never[] }, string | undefined, boolean][] = [
      ['wanted and in force', { ioLimits: wanted, applied: [limit] as never[] }, 'data/db-0', true],
      ['wanted, not yet applied', { ioLimits: wanted }, 'data/db-0', true],
      ['no longer wanted, still in force', { applied: [limit] as never[] }, undefined, true],
      ['none', {}, undefined, false],
    ];
    for (const [name, health, pods, awaits] of table) {
      const plan = planCleanup({
        ...empty,
        nodes: [aNode('n1').build()],
        healths: [{ view: { name: 'n1', ...health }, version: '7' }],
      });
      const lift = plan.steps.find((s) => s.kind === 'LiftIoLimits');
      expect(lift?.changes, name).to.deep.equal(
        pods
          ? [
              `2 IO limit(s) no longer wanted (${pods}): its node's agent lifts them, putting back what the files held`,
            ]
          : undefined,
      );
      if (lift?.kind === 'LiftIoLimits') expect(lift.read, name).to.deep.equal(wanted);
      expect(plan.steps.at(-1), name).to.include({ kind: 'DeleteHealth', awaitLift: awaits });
      const kept = planCleanup({
        ...empty,
        keepHealth: true,
        healths: [{ view: { name: 'n1', ...health }, version: '7' }],
      });
      expect(
        kept.steps.map((s) => s.kind),
        `${name}, --keep-health: lifted all the same`,
      ).to.deep.equal(pods ? ['LiftIoLimits'] : []);
    }
    const gone = planCleanup({
      ...empty,
      healths: [{ view: { name: 'n1', applied: [limit] as never[] }, version: '7' }],
    });
    expect(gone.steps.at(-1), 'its node gone, and its cgroups with it').to.include({ awaitLift: false });
    const unlisted = planCleanup({
      ...empty,
      nodesListed: false,
      healths: [{ view: { name: 'n1', applied: [limit] as never[] }, version: '7' }],
    });
    expect(unlisted.steps.at(-1), 'the nodes not listed: waited for').to.include({ awaitLift: true });
    const unreadable = planCleanup({
      ...empty,
      nodes: [aNode('n1').build()],
      healths: [{ view: { name: 'n1', unreadableLimits: true }, version: '7' }],
    });
    expect(unreadable.steps, 'limits that do not parse: kept').to.deep.equal([]);
    expect(unreadable.leftAlone[0]?.why).to.match(/^kept: its IO limits .* do not parse/);
  });

  it('orders the steps IO limits, gates, rollouts, nodes, conditions, leases, SandboxHealths: the reverse of how the operator acts', () => {
    const plan = planCleanup({
      ...empty,
      nodes: [aNode('n1').cordoned().stampedBy('p', { cordoned: true }).withOurCondition().build()],
      workloads: [aDeployment('web', { paused: true, pausedBy: 'p' })],
      gatedPods: [aGatedPod('web-1')],
      leases: [aNodeLease('n1', 'sandbox-remediator-p')],
      healths: [{ view: { name: 'n1', ioLimits: [{ pod: 'data/db-0' }] as never[] }, version: '1' }],
    });
    expect(plan.steps.map((s) => s.kind)).to.deep.equal([
      'LiftIoLimits',
      'ReleaseGate',
      'ReleaseRollout',
      'ReleaseNode',
      'RemoveNodeCondition',
      'DeleteLease',
      'DeleteHealth',
    ]);
  });
});
