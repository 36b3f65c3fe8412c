// The escalation ladder with its real next rung: medik8s node-healthcheck-operator (NHC) run against the local
// cluster (test/support/node-healthcheck.ts), watching the operator's Node condition. A node the operator fenced and
// emptied that stays saturated past remediation.escalation.afterSeconds gets the reason RemediationExhausted (a Warning
// Event, a metric, the same lastTransitionTime); NHC, timing the condition from that lastTransitionTime, remediates
// that node and no other, and gives the node back once the operator writes it recovered. With safety.nodeLease the
// operator holds medik8s' node lease while it remediates and gives it up on escalation, so NHC can take it and act.
import { CoordinationV1Api } from '@kubernetes/client-node';
import { expect } from 'chai';
import { join } from 'node:path';
import { nodeView } from '../../src/kube/views.js';
import type { RawObject } from '../../src/kube/informer.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubectl,
  uniqueName,
} from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import {
  createNodeHealthCheck,
  MEDIK8S_LEASES,
  listRemediations,
  readNodeHealthCheck,
  startNodeHealthcheck,
  type NodeHealthcheck,
} from '../support/node-healthcheck.js';
import { useOperator } from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy, getHealth } from '../support/resources.js';
import { SaturatedNode } from '../support/saturated-node.js';
import { createSpreadDeployment, eventsWithReasonAtLeast, readNode } from '../support/workloads.js';

const log = (msg: string) => {
  console.error(`      [node-healthcheck] ${msg}`);
};
const ESCALATE_AFTER_SECONDS = 60;
/** Above afterSeconds, as the samples advise: the operator's own remedies get their chance first. */
const NHC_DURATION_SECONDS = ESCALATE_AFTER_SECONDS + 10;

const leaseHolderOf = async (node: string) => {
  const leases = await api()
    .kc.makeApiClient(CoordinationV1Api)
    .listNamespacedLease({ namespace: MEDIK8S_LEASES });
  return leases.items.find((l) => l.metadata?.name === `node-${node}`)?.spec?.holderIdentity;
};

async function ownCondition(node: string) {
  const got = await kubectl(['get', 'node', node, '-o', 'json']);
  expect(got.code, got.stderr).to.equal(0);
  return nodeView(JSON.parse(got.stdout) as RawObject)!.ownCondition;
}

describe('escalation to NodeHealthCheck', function () {
  const operator = useOperator([], { serviceAccount: 'escalation' });
  const cleanup = new Cleanup();
  let nhc: NodeHealthcheck;
  before(async function () {
    this.timeout(90_000);
    // The opt-in grant of safety.nodeLease, and the namespace medik8s keeps its leases in (NHC would make it).
    await kubectl(['create', 'namespace', MEDIK8S_LEASES]);
    const granted = await kubectl(['apply', '-k', join(REPO_ROOT, 'config/node-lease')]);
    expect(granted.code, granted.stderr).to.equal(0);
    nhc = await startNodeHealthcheck();
  });
  after(async function () {
    this.timeout(60_000);
    const code = await nhc.stop();
    await kubectl(['delete', '-k', join(REPO_ROOT, 'config/node-lease'), '--ignore-not-found']);
    await kubectl(['delete', 'namespace', MEDIK8S_LEASES, '--ignore-not-found', '--wait=false']);
    expect(code, `NHC's exit on SIGTERM:\n${nhc.tail()}`).to.equal(0);
  });
  afterEach(() => cleanup.run());

  it('a node still saturated after the cordon and the evictions turns RemediationExhausted, and NHC remediates it alone', async function () {
    this.timeout(300_000);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 6);
    const sickName = names[0]!;
    const policy = uniqueName('it-escalate');
    await applyPolicy(cleanup, policy, {
      nodeSelector: { matchLabels: { 'sandbox.remediator.io/test-pool': pool } },
      detection: { stuckThresholdSeconds: 3 },
      ioPressure: FAST_IO,
      remediation: { escalation: { afterSeconds: ESCALATE_AFTER_SECONDS } },
      safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5, nodeLease: true },
    });
    const check = await createNodeHealthCheck(cleanup, nhc, {
      nodes: names,
      durationSeconds: NHC_DURATION_SECONDS,
    });
    await eventually('SandboxHealth for every pool node', async () =>
      (await Promise.all(names.map(getHealth))).every((h) => h !== undefined),
    );
    const sick = new SaturatedNode(sickName, cleanup);
    await sick.start();
    await createSpreadDeployment(cleanup, namespace, 'web', pool, 12);
    await sick.pressure('load');

    const marked = await eventually(
      'cordoned and SandboxCreationDegraded=True IoSaturated',
      async () => {
        const cordoned = (await readNode(sickName)).spec?.unschedulable === true;
        const own = await ownCondition(sickName);
        return cordoned && own?.status === 'True' ? own : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(marked.reason).to.equal('IoSaturated');
    expect(await leaseHolderOf(sickName), 'the lease ours while the operator remediates').to.equal(
      `sandbox-remediator-${policy}`,
    );
    await eventsWithReasonAtLeast(2, 'EvictedStuckPod', namespace);
    expect(await listRemediations(nhc, check), 'NHC waits for its duration').to.deep.equal([]);

    const exhausted = await eventually(
      'the reason RemediationExhausted, afterSeconds after the fence',
      async () => {
        const own = await ownCondition(sickName);
        return own?.reason === 'RemediationExhausted' ? own : undefined;
      },
      { timeoutMs: (ESCALATE_AFTER_SECONDS + 30) * 1000, intervalMs: 1000 },
    );
    const exhaustedAt = Date.now();
    expect(exhausted.status).to.equal('True');
    expect(exhausted.lastTransitionTime, 'NHC times the condition from here').to.equal(
      marked.lastTransitionTime,
    );
    expect(exhausted.message).to.match(/still IO-saturated/i);
    const warnings = await eventsWithReasonAtLeast(1, 'RemediationExhausted', 'default', sickName);
    expect(warnings).to.have.length(1);
    const metrics = (await operator.get('/metrics', operator.metricsPort)).text;
    expect(metrics).to.contain(`sandbox_remediator_escalations_total{policy="${policy}"} 1`);

    const remediations = await eventually(
      `NHC's remediation, ${NHC_DURATION_SECONDS} s after the condition's lastTransitionTime`,
      async () => {
        const found = await listRemediations(nhc, check);
        return found.length > 0 ? found : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 1000 },
    );
    expect(
      remediations.map((r) => r.nodeName),
      'the saturated node alone',
    ).to.deep.equal([sickName]);
    const since = new Date(marked.lastTransitionTime ?? 0).getTime();
    expect(since, 'a lastTransitionTime').to.be.above(0);
    // creationTimestamp is whole seconds, as lastTransitionTime is.
    expect(remediations[0]!.createdAt.getTime() - since).to.be.at.least(NHC_DURATION_SECONDS * 1000);
    expect(await leaseHolderOf(sickName), 'given up on escalation, and taken by NHC').to.match(
      /^NodeHealthCheck-/,
    );
    const status = (await readNodeHealthCheck(check)).status;
    expect(status?.unhealthyNodes?.map((n) => n.name)).to.deep.equal([sickName]);
    log(
      `exhausted ${Math.round((exhaustedAt - since) / 1000)} s after the condition turned True; NHC remediated ${sickName} ${Math.round((remediations[0]!.createdAt.getTime() - since) / 1000)} s after`,
    );

    await sick.end();
    const recovered = await eventually(
      'SandboxCreationDegraded=False Recovered',
      async () => {
        const own = await ownCondition(sickName);
        return own?.status === 'False' ? own : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(recovered.reason).to.equal('Recovered');
    await eventually(
      'NHC ends its remediation of the recovered node',
      async () => (await listRemediations(nhc, check)).length === 0,
      { timeoutMs: 60_000, intervalMs: 1000 },
    );
    await eventually(
      'the node uncordoned by the operator',
      async () => (await readNode(sickName)).spec?.unschedulable !== true,
      { timeoutMs: 90_000 },
    );
  });
});
