import { expect } from 'chai';
import { api, Cleanup, eventually, hack, kubectl } from '../support/cluster.js';
import { applyCrds, OperatorProcess } from '../support/operator-process.js';
import { saturablePool } from '../support/saturable-pool.js';
import {
  createRolloutDeployment,
  isComplete,
  pausedBy,
  readDeployment,
  restartRollout,
} from '../support/rollouts.js';
import { condition, getHealth, getPolicyStatus } from '../support/resources.js';
import {
  eventsWithReason,
  eventsWithReasonAtLeast,
  isRunning,
  podsOf,
  startIncident,
} from '../support/workloads.js';

/** Waits until some node of the pool is IoPressureHigh=True. */
async function ioPressureHighIn(pool: string): Promise<void> {
  await eventually(
    `IoPressureHigh=True in ${pool}`,
    async () => {
      const nodes = await api().core.listNode({ labelSelector: `sandbox.remediator.io/test-pool=${pool}` });
      for (const n of nodes.items)
        if (condition((await getHealth(n.metadata!.name!))?.conditions, 'IoPressureHigh')?.status === 'True')
          return true;
      return false;
    },
    { timeoutMs: 60_000 },
  );
}

describe('rollout throttling on the real cluster', function () {
  const cleanup = new Cleanup();
  const operators: OperatorProcess[] = [];
  const startOperator = async () => {
    const operator = new OperatorProcess();
    operators.push(operator);
    // As the Deployment runs it: its ServiceAccount under config/rbac's role and admission policy.
    await operator.startAsOperatorAccount(`rollouts-${operators.length}`);
    return operator;
  };
  before(() => applyCrds());
  afterEach(async () => {
    for (const o of operators.splice(0)) await o.stop();
    await cleanup.run();
  });

  /** A pool of 3 nodes; `sick` gets the agent over a crafted /proc and, on demand, the incident. */
  async function pool(spec: Record<string, unknown>) {
    const [first] = await saturablePool(cleanup, spec);
    return first!;
  }

  it('pauses a rollout feeding a saturated node with our stamp; a new process after kill -9 adopts it and resumes it after recovery, and the rollout finishes', async function () {
    this.timeout(240_000);
    await startOperator();
    const {
      namespace,
      pool: p,
      sick,
      policy,
      proc,
    } = await pool({
      remediation: { evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: 5 } },
    });
    await createRolloutDeployment(cleanup, namespace, 'web', p, sick);
    await eventually('web available', async () => isComplete(await readDeployment(namespace, 'web')), {
      timeoutMs: 60_000,
    });
    await startIncident(cleanup, sick);
    await restartRollout(namespace, 'web');
    await eventually('the new pod stuck on the sick node', async () =>
      (await podsOf(namespace, 'web')).some((pod) => pod.spec?.nodeName === sick && !isRunning(pod)),
    );
    await proc.setPressure('load');

    const paused = await eventually(
      'web paused with our stamp',
      async () => {
        const d = await readDeployment(namespace, 'web');
        return d.spec?.paused === true && pausedBy(d) === policy ? d : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(paused.metadata?.annotations).to.include({
      'sandbox.remediator.io/pause-reason': 'FeedsSaturatedNode',
    });
    expect(await eventsWithReasonAtLeast(1, 'RolloutPaused', namespace, 'web')).to.have.length(1);
    const health = await eventually('RolloutsThrottled on the sick node', async () => {
      const h = await getHealth(sick);
      return condition(h?.conditions, 'RolloutsThrottled')?.status === 'True' ? h : undefined;
    });
    expect(condition(health.conditions, 'RolloutsThrottled')?.message).to.contain(
      `deployment/${namespace}/web`,
    );
    const status = await getPolicyStatus(policy);
    expect(status?.throttledRollouts).to.deep.include({
      kind: 'Deployment',
      name: `${namespace}/web`,
      reason: 'FeedsSaturatedNode',
      feeds: [sick],
      since: status?.throttledRollouts?.[0]?.since,
      dryRun: false,
    });

    // A crash while the Deployment is paused: the stamps on it are all a new process needs.
    operators[0]!.kill();
    await operators[0]!.exited;
    const second = await startOperator();
    await hack('incident', ['stop', '--node', sick]);
    await proc.setPressure('idle');
    const resumed = await eventually(
      'web resumed after recovery, unstamped',
      async () => {
        const d = await readDeployment(namespace, 'web');
        return d.spec?.paused !== true && !pausedBy(d) ? d : undefined;
      },
      { timeoutMs: 90_000 },
    );
    expect(resumed.metadata?.annotations ?? {}).to.not.have.property('sandbox.remediator.io/pause-reason');
    // Logged once the write's answer is back, which may be after the apiserver shows it.
    await eventually('the release logged', () =>
      Promise.resolve(second.logs.some((l) => l.message === 'Released rollout')),
    );
    await eventually('the rollout finished', async () => isComplete(await readDeployment(namespace, 'web')), {
      timeoutMs: 60_000,
    });
    expect(await eventsWithReasonAtLeast(1, 'RolloutPaused', namespace, 'web'), 'paused once').to.have.length(
      1,
    );
    expect(await eventsWithReasonAtLeast(1, 'RolloutResumed', namespace, 'web')).to.have.length(1);
  });

  it('never touches a Deployment the user paused, and leaves one the user resumed alone for the cooldown', async function () {
    this.timeout(240_000);
    await startOperator();
    const {
      namespace,
      pool: p,
      sick,
      proc,
    } = await pool({
      remediation: { evictStuckPods: false, throttleRollouts: { maxConcurrentRollouts: 5 } },
      safety: { maxUnhealthyNodes: 1, cooldownSeconds: 20 },
    });
    for (const name of ['theirs', 'resumed'])
      await createRolloutDeployment(cleanup, namespace, name, p, sick);
    for (const name of ['theirs', 'resumed'])
      await eventually(`${name} available`, async () => isComplete(await readDeployment(namespace, name)), {
        timeoutMs: 60_000,
      });
    await startIncident(cleanup, sick);
    for (const name of ['theirs', 'resumed']) await restartRollout(namespace, name);
    await kubectl(['rollout', 'pause', 'deployment/theirs', '-n', namespace]);
    await eventually('both new pods stuck on the sick node', async () => {
      const pods = [...(await podsOf(namespace, 'theirs')), ...(await podsOf(namespace, 'resumed'))];
      return pods.filter((pod) => pod.spec?.nodeName === sick && !isRunning(pod)).length >= 1;
    });
    await proc.setPressure('load');
    await eventually(
      'resumed paused by us',
      async () => pausedBy(await readDeployment(namespace, 'resumed')) !== undefined,
      {
        timeoutMs: 60_000,
      },
    );
    expect(pausedBy(await readDeployment(namespace, 'theirs')), 'the user pause is not ours').to.equal(
      undefined,
    );

    expect((await kubectl(['rollout', 'resume', 'deployment/resumed', '-n', namespace])).code).to.equal(0);
    const released = await eventually('our stamp dropped', async () => {
      const d = await readDeployment(namespace, 'resumed');
      return !pausedBy(d) ? d : undefined;
    });
    expect(released.metadata?.annotations).to.have.property('sandbox.remediator.io/hands-off-until');
    expect(await eventsWithReasonAtLeast(1, 'RemediationReleased', namespace, 'resumed')).to.have.length(1);
    // Still feeding the saturated node, but within the cooldown it is left alone.
    for (let i = 0; i < 8; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      expect((await readDeployment(namespace, 'resumed')).spec?.paused ?? false, `second ${i}`).to.equal(
        false,
      );
    }

    await hack('incident', ['stop', '--node', sick]);
    await proc.setPressure('idle');
    await eventually(
      'the node recovered',
      async () => condition((await getHealth(sick))?.conditions, 'Cordoned')?.status === 'False',
      {
        timeoutMs: 60_000,
      },
    );
    const theirs = await readDeployment(namespace, 'theirs');
    expect(theirs.spec?.paused, 'still paused: the user paused it').to.equal(true);
    expect(await eventsWithReason('RolloutPaused', namespace, 'theirs')).to.deep.equal([]);
    expect(await eventsWithReason('RolloutResumed', namespace, 'theirs')).to.deep.equal([]);
  });

  it('lets at most maxConcurrentRollouts roll out at once under pressure, and finishes them in the order they started', async function () {
    this.timeout(240_000);
    await startOperator();
    const {
      namespace,
      pool: p,
      sick,
      proc,
    } = await pool({
      remediation: { throttleRollouts: { maxConcurrentRollouts: 1 } },
    });
    const names = ['a', 'b', 'c'];
    // Their pods prefer the saturated node: only rollouts whose new pods could land there count (issue 40).
    for (const name of names) await createRolloutDeployment(cleanup, namespace, name, p, sick);
    for (const name of names)
      await eventually(`${name} available`, async () => isComplete(await readDeployment(namespace, name)), {
        timeoutMs: 60_000,
      });
    await proc.setPressure('load');
    await ioPressureHighIn(p);

    for (const name of names) await restartRollout(namespace, name);
    const finished = new Map<string, number>();
    let maxProgressing = 0;
    const deadline = Date.now() + 150_000;
    await new Promise((r) => setTimeout(r, 1000));
    while (finished.size < names.length && Date.now() < deadline) {
      const current = await Promise.all(names.map((n) => readDeployment(namespace, n)));
      const progressing = current.filter((d) => !isComplete(d) && d.spec?.paused !== true);
      maxProgressing = Math.max(maxProgressing, progressing.length);
      for (const [i, d] of current.entries())
        if (isComplete(d) && !finished.has(names[i]!)) finished.set(names[i]!, Date.now());
      await new Promise((r) => setTimeout(r, 1000));
    }
    expect(maxProgressing, 'progressing at once, sampled every second').to.equal(1);
    expect([...finished.keys()], 'finished in the order they started').to.deep.equal(names);
    for (const name of names) expect(pausedBy(await readDeployment(namespace, name))).to.equal(undefined);
    expect(await eventsWithReasonAtLeast(2, 'RolloutPaused', namespace)).to.have.length(2);
    await proc.setPressure('idle');
  });

  it('in a dry run makes the same decisions and Events, and changes no Deployment', async function () {
    this.timeout(180_000);
    await startOperator();
    const {
      namespace,
      pool: p,
      sick,
      proc,
      policy,
    } = await pool({
      remediation: { throttleRollouts: { maxConcurrentRollouts: 1 } },
      safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5, dryRun: true },
    });
    for (const name of ['a', 'b']) await createRolloutDeployment(cleanup, namespace, name, p, sick);
    for (const name of ['a', 'b'])
      await eventually(`${name} available`, async () => isComplete(await readDeployment(namespace, name)), {
        timeoutMs: 60_000,
      });
    await proc.setPressure('load');
    await ioPressureHighIn(p);
    const generations = async () =>
      Promise.all(['a', 'b'].map(async (n) => (await readDeployment(namespace, n)).metadata?.generation));
    for (const name of ['a', 'b']) await restartRollout(namespace, name);
    const after = await generations();
    const events = await eventually('the dry-run pause Event', async () => {
      const e = await eventsWithReason('RolloutPaused', namespace);
      return e.length > 0 ? e : undefined;
    });
    expect(events).to.have.length(1);
    expect(events[0]!.message).to.match(/^Dry run, nothing changed: /);
    const status = await getPolicyStatus(policy);
    expect(status?.throttledRollouts?.map((r) => [r.name, r.reason, r.dryRun])).to.deep.equal([
      [`${namespace}/b`, 'RolloutQueued', true],
    ]);
    for (const name of ['a', 'b']) {
      const d = await readDeployment(namespace, name);
      expect(d.spec?.paused ?? false, name).to.equal(false);
      expect(pausedBy(d), name).to.equal(undefined);
    }
    expect(await generations(), 'no spec changed by us').to.deep.equal(after);
    await new Promise((r) => setTimeout(r, 3000));
    expect(await eventsWithReasonAtLeast(1, 'RolloutPaused', namespace), 'not repeated').to.have.length(1);
    await proc.setPressure('idle');
  });
  // Pausing removes no capacity: it needs no cordon of ours (issue 26's defect: it did).
  for (const [title, spec, sickCount] of [
    ['with cordon off', { remediation: { cordon: false } }, 1],
    // Two saturated nodes, more than maxUnhealthyNodes (0): a storm from the first on, so nothing is cordoned.
    ['in a storm over more nodes than maxUnhealthyNodes', { safety: { maxUnhealthyNodes: 0 } }, 2],
  ] as const)
    it(`pauses the rollouts feeding saturated nodes it did not cordon ${title}, and resumes them after recovery`, async function () {
      this.timeout(240_000);
      await startOperator();
      const { remediation = {}, safety = {} } = spec as { remediation?: object; safety?: object };
      const sick = await saturablePool(
        cleanup,
        {
          remediation: {
            evictStuckPods: false,
            throttleRollouts: { maxConcurrentRollouts: 5 },
            ...remediation,
          },
          safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5, ...safety },
        },
        { size: 4, sickCount },
      );
      const { namespace, pool: p, policy } = sick[0]!;
      const names = sick.map((_, i) => `web-${i}`);
      for (const [i, s] of sick.entries())
        await createRolloutDeployment(cleanup, namespace, names[i]!, p, s.sick);
      for (const name of names)
        await eventually(`${name} available`, async () => isComplete(await readDeployment(namespace, name)), {
          timeoutMs: 60_000,
        });
      for (const s of sick) await startIncident(cleanup, s.sick);
      for (const name of names) await restartRollout(namespace, name);
      for (const s of sick) await s.proc.setPressure('load');

      for (const name of names) {
        const d = await eventually(
          `${name} paused with our stamp`,
          async () => {
            const d = await readDeployment(namespace, name);
            return d.spec?.paused === true && pausedBy(d) === policy ? d : undefined;
          },
          { timeoutMs: 90_000 },
        );
        expect(d.metadata?.annotations).to.include({
          'sandbox.remediator.io/pause-reason': 'FeedsSaturatedNode',
        });
      }
      const listed = (await getPolicyStatus(policy))?.throttledRollouts ?? [];
      expect(listed.map((r) => r.name).sort()).to.deep.equal(names.map((n) => `${namespace}/${n}`));
      for (const s of sick) {
        const node = await api().core.readNode({ name: s.sick });
        expect(node.spec?.unschedulable ?? false, `${s.sick} not cordoned`).to.equal(false);
        const h = await getHealth(s.sick);
        expect(condition(h?.conditions, 'RolloutsThrottled')?.status, s.sick).to.equal('True');
      }

      for (const s of sick) {
        await hack('incident', ['stop', '--node', s.sick]);
        await s.proc.setPressure('idle');
      }
      for (const name of names) {
        await eventually(
          `${name} resumed after recovery, unstamped`,
          async () => {
            const d = await readDeployment(namespace, name);
            return d.spec?.paused !== true && !pausedBy(d);
          },
          { timeoutMs: 90_000 },
        );
        await eventually(`${name} finished`, async () => isComplete(await readDeployment(namespace, name)), {
          timeoutMs: 60_000,
        });
      }
    });
});
