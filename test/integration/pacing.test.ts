import type { V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import { AgentProcess } from '../support/agent-process.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { freePort } from '../support/monitoring.js';
import {
  applyCrds,
  applyWebhookConfig,
  deleteWebhookConfig,
  OperatorProcess,
} from '../support/operator-process.js';
import { FAST_IO, ProcRoot } from '../support/proc-root.js';
import { applyPolicy, condition, getHealth, getPolicyStatus } from '../support/resources.js';
import { armedAs, armedFor, callsDuring } from '../support/webhook-calls.js';
import { eventsWithReason } from '../support/workloads.js';

const GATE = 'sandbox.remediator.io/paced';
const log = (msg: string) => {
  console.error(`      [pacing] ${msg}`);
};
const gated = (pod: V1Pod) => (pod.spec?.schedulingGates ?? []).some((g) => g.name === GATE);

describe('pod-start pacing through the webhook on the real cluster', function () {
  const cleanup = new Cleanup();
  const operators: OperatorProcess[] = [];
  let webhookPort = 0;
  const startOperator = async () => {
    const operator = new OperatorProcess();
    operators.push(operator);
    // As the Deployment runs it: its ServiceAccount under config/rbac's role and admission policy, filling in the
    // webhook configuration config/webhook ships.
    await operator.startAsOperatorAccount(`pacing-${operators.length}`, [
      `--webhook-bind-address=127.0.0.1:${webhookPort}`,
    ]);
    await operator.waitForLog('Serving the pacing webhook', 30_000);
    return operator;
  };
  before(async () => {
    await applyCrds();
    await applyWebhookConfig();
    webhookPort = await freePort();
  });
  after(async () => {
    for (const o of operators.splice(0)) await o.stop();
    await cleanup.run();
    await deleteWebhookConfig();
  });

  it("gates new pods in opted-in namespaces under pressure, lifts at most maxPodStartsPerMinute across kill -9, releases the rest when the pressure ends, is called only where and while it paces (the apiserver's metrics, the leader hung too), and never blocks pod creation", async function () {
    this.timeout(300_000);
    const first = await startOperator();
    const paced = await createNamespace(cleanup, 'paced');
    const other = await createNamespace(cleanup, 'other');
    await kubectl(['label', 'namespace', paced, 'pacing=on']);
    const { pool, names } = await createNodes(cleanup, 3);
    const sick = names[0]!;
    const policy = uniqueName('it-pacing');
    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      ioPressure: FAST_IO,
      remediation: {
        throttleRollouts: {
          pacePodStarts: {
            maxPodStartsPerMinute: 10,
            namespaceSelector: { matchLabels: { pacing: 'on' } },
            maxGateSeconds: 600,
          },
        },
      },
    });
    const proc = new ProcRoot();
    cleanup.add(() => proc.remove());
    const agent = new AgentProcess();
    cleanup.add(() => agent.stop());
    agent.start(sick, [
      `--proc-root=${await proc.create()}`,
      '--interval-seconds=1',
      '--heartbeat-seconds=3',
    ]);
    const { core } = api();
    const pod = (name: string): V1Pod => ({
      metadata: { name },
      spec: {
        nodeSelector: { 'sandbox.remediator.io/test-pool': pool },
        containers: [{ name: 'app', image: 'registry.local/app:1' }],
      },
    });

    await eventually(
      'a low reading on the node',
      async () => condition((await getHealth(sick))?.conditions, 'IoPressureHigh')?.status === 'False',
      {
        timeoutMs: 60_000,
      },
    );
    // Issue 41: nothing saturated, so the webhook is disarmed, and the apiserver calls it for no pod at all.
    await eventually('disarmed', async () => (await armedAs()) === 'false');
    let calm: V1Pod | undefined;
    const calmCalls = await callsDuring(
      async () => (calm = await core.createNamespacedPod({ namespace: paced, body: pod('before-pressure') })),
    );
    expect(gated(calm!), 'no pressure: no gate').to.equal(false);
    expect(calmCalls.calls, 'no call while disarmed').to.equal(0);

    await proc.setPressure('load');
    await eventually(
      'IoPressureHigh',
      async () => condition((await getHealth(sick))?.conditions, 'IoPressureHigh')?.status === 'True',
      {
        timeoutMs: 60_000,
      },
    );
    // Armed for the paced namespace only, once the pass that raised it has published the gating.
    await eventually('armed', async () => armedFor(await armedAs(), paced));
    expect(armedFor(await armedAs(), other), 'not for a namespace nobody paces').to.equal(false);
    const creating = Date.now(); // no release can come before the pods are
    let created: V1Pod[] = [];
    const armedCalls = await callsDuring(
      async () =>
        (created = await Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            core.createNamespacedPod({ namespace: paced, body: pod(`p${i}`) }),
          ),
        )),
    );
    const start = Date.now();
    expect(created.filter(gated), 'all 30 gated by the apiserver calling the webhook').to.have.length(30);
    expect(armedCalls.calls, 'one call per pod').to.equal(30);
    expect(created[0]!.metadata?.annotations?.['sandbox.remediator.io/gated-by']).to.equal(policy);
    let elsewhere: V1Pod | undefined;
    const elsewhereCalls = await callsDuring(
      async () =>
        (elsewhere = await core.createNamespacedPod({ namespace: other, body: pod('not-opted-in') })),
    );
    expect(gated(elsewhere!), 'a namespace not selected').to.equal(false);
    expect(elsewhereCalls.calls, 'a namespace nobody paces never reaches the webhook').to.equal(0);
    // Issue 40: a pod that can land on no saturated node starts ungated, in a paced namespace too.
    const healthyOnly: V1Pod = {
      metadata: { name: 'healthy-node-only' },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': names[1]! },
        containers: [{ name: 'app', image: 'registry.local/app:1' }],
      },
    };
    const kept = await core.createNamespacedPod({ namespace: paced, body: healthyOnly });
    expect(gated(kept), 'a pod its nodeSelector keeps off the saturated node').to.equal(false);

    // A release is seen by a list, so its time is known only between two: after the list before it was sent
    // (`after`) and before the list that shows it returned (`by`).
    const releasedAt = new Map<string, { after: number; by: number }>();
    let lastSent = creating;
    const sample = async () => {
      const sent = Date.now();
      const list = await core.listNamespacedPod({ namespace: paced });
      const returned = Date.now();
      for (const p of list.items)
        if (p.metadata?.name?.startsWith('p') && !gated(p) && !releasedAt.has(p.metadata.name))
          releasedAt.set(p.metadata.name, { after: lastSent, by: returned });
      lastSent = sent;
    };
    const sampleFor = async (ms: number) => {
      const until = Date.now() + ms;
      while (Date.now() < until) {
        await sample();
        await new Promise((r) => setTimeout(r, 500));
      }
    };
    await sampleFor(15_000);
    log(`${releasedAt.size} released in the first 15 s`);
    expect(releasedAt.size, 'the first minute').to.equal(10);

    // A crash with 20 pods still gated: the new process honours the rate spent in status, then goes on.
    first.kill();
    await first.exited;
    await startOperator();
    await sampleFor(Math.max(0, start + 50_000 - Date.now()));
    expect(releasedAt.size, 'still 10 within the first minute, across the restart').to.equal(10);
    await sampleFor(Math.max(0, start + 80_000 - Date.now()));
    log(`${releasedAt.size} released after 80 s`);
    expect(releasedAt.size, 'ten more in the second minute').to.equal(20);
    // Eleven releases inside 60 s would put the 11th's latest possible time less than 60 s after the 1st's earliest.
    const seen = [...releasedAt.values()];
    const earliest = seen.map((s) => s.after).sort((a, b) => a - b);
    const latest = seen.map((s) => s.by).sort((a, b) => a - b);
    for (let i = 0; i + 10 < seen.length; i++)
      expect(latest[i + 10]! - earliest[i]!, 'at most 10 in any 60 s').to.be.at.least(60_000);
    expect((await getPolicyStatus(policy))?.gatedPods).to.equal(10);

    await proc.setPressure('idle');
    await eventually(
      'every pod released once the pressure is gone',
      async () => {
        await sample();
        return releasedAt.size === 30;
      },
      { timeoutMs: 60_000 },
    );
    expect((await eventsWithReason('PodStartHeld', paced)).length).to.be.at.least(30);
    expect((await eventsWithReason('PodStartReleased', paced)).length).to.be.at.least(30);
    await eventually('disarmed once the pressure is gone', async () => (await armedAs()) === 'false');
    const calmAgain = await callsDuring(() =>
      core.createNamespacedPod({ namespace: paced, body: pod('after-pressure') }),
    );
    expect(calmAgain.calls, 'no call once disarmed').to.equal(0);

    // The leader hung while armed: a namespace nobody paces is not slowed (no call at all); a paced one waits for the
    // webhook's timeout and fails open.
    await proc.setPressure('load');
    await eventually('armed again', async () => armedFor(await armedAs(), paced), {
      timeoutMs: 60_000,
    });
    const leader = operators.at(-1)!;
    leader.pause();
    try {
      const unpaced = await callsDuring(() =>
        core.createNamespacedPod({ namespace: other, body: pod('leader-hung') }),
      );
      expect(unpaced.calls, 'leader hung: no call for a namespace nobody paces').to.equal(0);
      const hung = await callsDuring(() =>
        core.createNamespacedPod({ namespace: paced, body: pod('hung-paced') }),
      );
      expect(hung, 'leader hung: the paced namespace calls it, and fails open').to.deep.equal({
        calls: 1,
        failedOpen: 1,
      });
    } finally {
      leader.resume();
    }

    // A clean stop disarms; the next leader arms again; deleting the last pacing policy disarms.
    expect(
      await leader.stop(),
      `exits 0:\n${leader.logs
        .slice(-15)
        .map((l) => JSON.stringify(l))
        .join('\n')}`,
    ).to.equal(0);
    operators.splice(operators.indexOf(leader), 1);
    expect(await armedAs(), 'disarmed by a clean stop').to.equal('false');
    const next = await startOperator();
    await eventually('armed by the next leader', async () => armedFor(await armedAs(), paced), {
      timeoutMs: 60_000,
    });
    await kubectl(['delete', 'sandboxpolicy', policy, '--wait']);
    await eventually('disarmed once no policy paces', async () => (await armedAs()) === 'false');
    next.pause();
    try {
      const noPolicy = await callsDuring(() =>
        core.createNamespacedPod({ namespace: paced, body: pod('no-policy') }),
      );
      expect(noPolicy.calls, 'no pacing policy: no call, the leader hung or not').to.equal(0);
    } finally {
      next.resume();
    }

    // With the operator down, the webhook fails open: pods are created, ungated, at once.
    for (const o of operators.splice(0)) await o.stop();
    const before = Date.now();
    const whileDown = await core.createNamespacedPod({ namespace: paced, body: pod('operator-down') });
    expect(gated(whileDown)).to.equal(false);
    expect(Date.now() - before, 'within the webhook timeout').to.be.below(5_000);
  });
});
