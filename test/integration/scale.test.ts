// The cost of a change at size: one policy over 100 kwok nodes and 3,000 pods, and one new pod costs the operator
// its own node, not the policy's 100. Counted by the operator's pass metrics (nodes looked at per kind of pass), not
// by wall clock; a policy edit, which must look at every node, shows that the counter counts.
import { expect } from 'chai';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  podBoundTo,
  uniqueName,
} from '../support/cluster.js';
import { applyCrds, OperatorProcess } from '../support/operator-process.js';
import { applyPolicy } from '../support/resources.js';

const NODES = 100;
const PODS_PER_NODE = 30;

/** The operator's pass counters: passes and nodes looked at, by kind of pass. */
async function passCounters(operator: OperatorProcess) {
  const text = (await operator.get('/metrics', operator.metricsPort)).text;
  const value = (name: string, pass: string) =>
    Number(new RegExp(`^${name}\\{pass="${pass}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return {
    fullPasses: value('sandbox_remediator_reconcile_passes_total', 'full'),
    incrementalPasses: value('sandbox_remediator_reconcile_passes_total', 'incremental'),
    fullNodes: value('sandbox_remediator_reconcile_nodes_observed_total', 'full'),
    incrementalNodes: value('sandbox_remediator_reconcile_nodes_observed_total', 'incremental'),
  };
}
type Counters = Awaited<ReturnType<typeof passCounters>>;

/**
 * The counters once `reached` holds and they stopped moving for 3 s: the operator has done the work asked of it
 * and caught up with the cluster.
 */
async function settledCounters(
  operator: OperatorProcess,
  reached: (c: Counters) => boolean,
  timeoutMs = 120_000,
): Promise<Counters> {
  let last = await passCounters(operator);
  let stableSince = Date.now();
  return eventually(
    'the operator to go quiet',
    async () => {
      const now = await passCounters(operator);
      if (JSON.stringify(now) !== JSON.stringify(last) || !reached(now)) {
        last = now;
        stableSince = Date.now();
        return undefined;
      }
      return Date.now() - stableSince >= 3_000 ? now : undefined;
    },
    { timeoutMs, intervalMs: 500 },
  );
}

describe('the cost of a change at 100 nodes and 3,000 pods', function () {
  this.timeout(300_000);
  const cleanup = new Cleanup();
  const operator = new OperatorProcess();

  before(applyCrds);
  after(async () => {
    await operator.stop();
    await cleanup.run();
  });

  it('looks again only at the node a new pod is on, and at every node on a policy edit', async () => {
    const namespace = await createNamespace(cleanup, 'scale');
    const { pool, names } = await createNodes(cleanup, NODES);
    const { core } = api();
    const pods = names.flatMap((node) =>
      Array.from({ length: PODS_PER_NODE }, (_, i) => ({ name: `${node}-p${i}`, node })),
    );
    let next = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < pods.length) {
          const { name, node } = pods[next++]!;
          await core.createNamespacedPod({ namespace, body: podBoundTo(name, node) });
        }
      }),
    );
    const policy = uniqueName('it-scale');
    const spec = {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      // The agent source, with no agent here: no readings, so nothing comes due with time alone.
      detection: { stuckThresholdSeconds: 600 },
    };
    await applyPolicy(cleanup, policy, spec);
    await operator.start(['--log-level=info']);
    const before = await settledCounters(operator, (c) => c.fullPasses >= 1);
    expect(before.fullNodes, 'the first pass looks at every node').to.be.at.least(NODES);

    // One new pod on one node: Pending, then Running (kwok), each change about that node alone.
    const node = names[42]!;
    await core.createNamespacedPod({ namespace, body: podBoundTo('one-more', node) });
    await eventually('the pod Running', async () => {
      const pod = await core.readNamespacedPod({ namespace, name: 'one-more' });
      return pod.status?.phase === 'Running';
    });
    const after = await settledCounters(operator, (c) => c.incrementalPasses > before.incrementalPasses);
    const passes = after.incrementalPasses - before.incrementalPasses;
    const looked = after.incrementalNodes - before.incrementalNodes;
    expect(after.fullPasses, 'no full pass for a pod change').to.equal(before.fullPasses);
    expect(passes, 'the change was reconciled').to.be.at.least(1);
    expect(looked, `nodes looked at in ${passes} pass(es)`).to.be.at.least(1).and.at.most(passes);

    // A policy edit may change what every node's status says: a full pass over all of them.
    await applyPolicy(cleanup, policy, { ...spec, detection: { stuckThresholdSeconds: 900 } });
    const edited = await settledCounters(operator, (c) => c.fullPasses > after.fullPasses);
    expect(edited.fullPasses).to.be.greaterThan(after.fullPasses);
    expect(edited.fullNodes - after.fullNodes).to.be.at.least(NODES);
  });
});
