// Node patching alone: one patch per node, what each answer of the apiserver leaves (a result, a retry, a refusal
// that stands until someone else changes the node), and whether a node ends up unschedulable.
import { expect } from 'chai';
import type { NodeStamps } from '../../../../src/api/v1alpha1/index.js';
import { Failures } from '../../../../src/controllers/failures.js';
import { patchNodes, unschedulableAfter } from '../../../../src/controllers/remediation/node-changes.js';
import { REFUSAL_RETRY_MS, RefusedChanges } from '../../../../src/controllers/remediation/refused-changes.js';
import type { NodeObservation } from '../../../../src/controllers/policy-memory.js';
import { silentLogger } from '../../../../src/observability/log.js';
import type { Action } from '../../../../src/policy/actions.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { TerminalError } from '../../../../src/runtime/controller.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import type { ActionResult } from '../../../../src/status/remediation-status.js';
import { T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

const cordon = (node: string): Action => ({
  kind: 'Cordon',
  node,
  target: `node/${node}`,
  reason: 'SandboxCreationStuckOnIo',
  message: 'stuck',
});
const STAMPS: NodeStamps = { policy: 'p', since: T0, taintsBefore: [], reason: 'stuck', cordoned: true };

function world() {
  const cluster = new MemoryCluster().addNodes(aNode('n1'), aNode('n2'));
  const refused = new RefusedChanges();
  const expectations = new Expectations(new FakeClock(T0.getTime()));
  const observe = (version: string): ReadonlyMap<string, NodeObservation> =>
    new Map(
      ['n1', 'n2'].map((name) => [
        name,
        { node: cluster.nodeMap.get(name)!, version } as unknown as NodeObservation,
      ]),
    );
  /** One round of patches of `nodes` on `version`: what was reported, what failed, what is blocked. */
  const patch = async (version: string, nodes = ['n1'], now = T0) => {
    const results: ActionResult[] = [];
    const dirty: string[] = [];
    const failures = new Failures(silentLogger, {});
    const { failedNodes, blocked } = await patchNodes(
      { expectations, refused, writeConcurrency: 2 },
      observe(version),
      {
        policy: 'p',
        uid: 'uid-p',
        generation: 1,
        now,
        actions: nodes.map(cordon),
        stampsAfter: new Map(nodes.map((n) => [n, STAMPS])),
        actuator: cluster,
        failures,
        report: (r) => results.push(r),
        markDirty: (n) => dirty.push(n),
      },
    );
    return {
      outcomes: results.map((r) => `${r.action.target} ${r.outcome}`),
      failed: [...failedNodes],
      blocked: blocked.map((b) => `${b.target} ${b.guard}`),
      retried: failures.retriable.length,
      dirty,
    };
  };
  return { cluster, refused, patch };
}

const conflict = () => Object.assign(new Error('changed'), { code: 409, body: {} });

describe('node patching', () => {
  const answers = [
    {
      name: 'a patch that succeeds is reported, and nothing retried',
      fail: undefined,
      want: { outcomes: ['node/n1 Succeeded'], failed: [], blocked: [], retried: 0, dirty: [] },
    },
    {
      name: 'a node changed meanwhile (409) is looked at again and retried, reported as nothing',
      fail: conflict,
      want: { outcomes: [], failed: ['n1'], blocked: [], retried: 1, dirty: ['n1'] },
    },
    {
      name: 'a patch that fails for now is reported Failed and retried',
      fail: () => new Error('etcdserver: request timed out'),
      want: { outcomes: ['node/n1 Failed'], failed: ['n1'], blocked: [], retried: 1, dirty: ['n1'] },
    },
    {
      name: 'a patch refused for what it is is reported Failed, and not retried',
      fail: () => new TerminalError('spec.taints: Invalid value'),
      want: { outcomes: ['node/n1 Failed'], failed: ['n1'], blocked: [], retried: 0, dirty: ['n1'] },
    },
  ];
  for (const { name, fail, want } of answers)
    it(name, async () => {
      const { cluster, patch } = world();
      if (fail) cluster.failNextNodePatch.set('n1', fail());
      expect(await patch('v1')).to.deep.equal(want);
    });

  it('patches each node once, side by side, and one failure stops none of the others', async () => {
    const { cluster, patch } = world();
    cluster.failNextNodePatch.set('n1', new Error('etcdserver: leader changed'));
    const got = await patch('v1', ['n1', 'n2']);
    expect(got.outcomes).to.have.members(['node/n1 Failed', 'node/n2 Succeeded']);
    expect(cluster.writes.filter((w) => w.startsWith('patch node/'))).to.have.members([
      'patch node/n1',
      'patch node/n2',
    ]);
  });

  it('sends a refused change again only once someone else changed the node, not after a write of our own', async () => {
    const { cluster, patch } = world();
    cluster.failNextNodePatch.set('n1', new TerminalError('spec.taints: Invalid value'));
    await patch('v1');
    cluster.takeWrites();
    expect((await patch('v1')).blocked, 'the same node: not sent').to.deep.equal(['node/n1 RefusedByApi']);
    await cluster.setNodeCondition('n1', {
      status: 'True',
      reason: 'IoSaturated',
      message: 'ours',
      lastTransitionTime: T0.toISOString(),
      lastHeartbeatTime: T0.toISOString(),
    });
    expect(
      (await patch(cluster.observedVersion('Node', 'n1')!)).blocked,
      'our own condition write changed nothing of theirs',
    ).to.deep.equal(['node/n1 RefusedByApi']);
    expect(cluster.takeWrites().filter((w) => w.startsWith('patch node/'))).to.deep.equal([]);
    cluster.changeNode('n1', (n) => ({ ...n, labels: { ...n.labels, fixed: 'true' } }));
    expect(
      (await patch(cluster.observedVersion('Node', 'n1')!)).outcomes,
      'someone changed the node: sent',
    ).to.deep.equal(['node/n1 Succeeded']);
  });

  it('sends a refused change again after REFUSAL_RETRY_MS, the node unchanged: what refused it may be fixed', async () => {
    const { cluster, patch } = world();
    cluster.failNextNodePatch.set('n1', new TerminalError('denied by an admission policy'));
    await patch('v1');
    const later = (ms: number) => new Date(T0.getTime() + ms);
    expect((await patch('v1', ['n1'], later(REFUSAL_RETRY_MS - 1))).blocked).to.deep.equal([
      'node/n1 RefusedByApi',
    ]);
    expect((await patch('v1', ['n1'], later(REFUSAL_RETRY_MS))).outcomes).to.deep.equal([
      'node/n1 Succeeded',
    ]);
  });

  const ends = [
    {
      name: 'a cordon that succeeded',
      kind: 'Cordon',
      outcome: 'Succeeded',
      simulated: false,
      from: false,
      want: true,
    },
    {
      name: 'a cordon that failed',
      kind: 'Cordon',
      outcome: 'Failed',
      simulated: false,
      from: false,
      want: false,
    },
    {
      name: "a dry run's cordon",
      kind: 'Cordon',
      outcome: 'Succeeded',
      simulated: true,
      from: false,
      want: false,
    },
    {
      name: 'an uncordon',
      kind: 'Uncordon',
      outcome: 'Succeeded',
      simulated: false,
      from: true,
      want: false,
    },
  ] as const;
  for (const { name, kind, outcome, simulated, from, want } of ends)
    it(`leaves the node ${want ? 'unschedulable' : 'schedulable'} after ${name}`, () => {
      const node = { ...aNode('n1'), unschedulable: from };
      const action = { ...cordon('n1'), kind };
      expect(unschedulableAfter(node, [{ action, outcome, simulated }])).to.equal(want);
    });
});
