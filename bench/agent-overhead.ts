// CPU and memory of the node agent sampling every second, side by side with node_exporter (Debian's
// prometheus-node-exporter) scraped every second, on the same machine in the same run, all at once so that each
// sees the same load. The agents run as deployed: compiled JavaScript with the NODE_OPTIONS of
// config/agent/daemonset.yaml. Four processes:
//   - agent, publishing: writes its readings into its node's SandboxHealth on the local cluster (started when not
//     running), with a ServiceAccount token bound to a pod on its node, as the kubelet mounts it, so the
//     admission policy of config/agent lets it through;
//   - agent --no-publish: what an agent costs on a node no policy selects yet, and the figure of earlier runs;
//   - agent --no-publish without the NODE_OPTIONS: what the flags buy;
//   - node_exporter.
// RSS is VmRSS (what `ps` and the goal count), and also split into anonymous (the process's own heap and
// stacks) and file-backed (pages of the node or Go binary, shared with any other process mapping them).
//
//   npx tsx bench/agent-overhead.ts [--seconds 60] [--no-cluster]
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GROUP, VERSION } from '../src/api/v1alpha1/index.js';
import {
  api,
  Cleanup,
  createNodes,
  isClusterUp,
  kubectl,
  podBoundTo,
  startCluster,
  uniqueName,
} from '../test/support/cluster.js';
import { REPO_ROOT } from '../test/support/manifests.js';
import { applyCrds, applyRbac } from '../test/support/operator-process.js';
import { createToken, writeTokenKubeconfig } from '../test/support/tokens.js';
import { buildDeployedAgent, MeasuredProcesses, ratio, ratiosTo, type Measured } from './agent-processes.js';

const SECONDS = Number(process.argv[process.argv.indexOf('--seconds') + 1]) || 60;
const WITH_CLUSTER = !process.argv.includes('--no-cluster');

/**
 * A kwok node with a SandboxHealth, and a kubeconfig whose only credential is a token of the agent's
 * ServiceAccount bound to a pod on that node. No operator runs here: nothing else writes or deletes it.
 */
async function publishingTarget(
  cleanup: Cleanup,
  dir: string,
): Promise<{ node: string; kubeconfig: string }> {
  if (!(await isClusterUp())) await startCluster();
  await applyCrds();
  await applyRbac();
  const policy = await kubectl(['apply', '-f', join(REPO_ROOT, 'config/agent/admission-policy.yaml')]);
  if (policy.code !== 0) throw new Error(policy.stderr);
  const {
    names: [node = ''],
  } = await createNodes(cleanup, 1);
  const health = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'SandboxHealth',
    metadata: { name: node },
    spec: { nodeName: node },
  };
  const created = await kubectl(['create', '-f', '-'], JSON.stringify(health));
  if (created.code !== 0) throw new Error(created.stderr);
  cleanup.add(() => kubectl(['delete', 'sandboxhealth', node, '--ignore-not-found']));
  const namespace = 'sandbox-remediator-agent';
  const pod = podBoundTo(uniqueName('agent-bench'), node);
  pod.spec!.serviceAccountName = 'sandbox-remediator-agent';
  await api().core.createNamespacedPod({ namespace, body: pod });
  cleanup.add(() =>
    api().core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace, gracePeriodSeconds: 0 }),
  );
  const token = await createToken(namespace, 'sandbox-remediator-agent', { boundToPod: pod.metadata!.name! });
  return { node, kubeconfig: await writeTokenKubeconfig(dir, 'agent-bench', token) };
}

const cleanup = new Cleanup();
const dir = mkdtempSync(join(tmpdir(), 'agent-overhead-'));
const processes = new MeasuredProcesses();
try {
  const nodeOptions = await buildDeployedAgent();
  const target = WITH_CLUSTER ? await publishingTarget(cleanup, dir) : undefined;
  if (target)
    await processes.startAgent('agent', nodeOptions, [
      `--node-name=${target.node}`,
      `--kubeconfig=${target.kubeconfig}`,
    ]);
  await processes.startAgent('agentNoPublish', nodeOptions, ['--node-name=bench', '--no-publish']);
  await processes.startAgent('agentNoPublishNoFlags', '', ['--node-name=bench', '--no-publish']);
  await processes.startNodeExporter();
  await processes.ready();
  const { measured, metricsAtEnd: metrics } = await processes.measure(SECONDS);
  const ne = measured.nodeExporter!;
  const ratios = (m: Measured | undefined) => ratiosTo(m, ne);
  const publishes = [
    ...(metrics.get('agent') ?? '').matchAll(
      /^sandbox_remediator_agent_publishes_total\{result="(\w+)"\} (\d+)/gm,
    ),
  ];
  const result = {
    date: new Date().toISOString(),
    seconds: SECONDS,
    loadAverage: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number),
    nodeOptions,
    ...(measured.agent
      ? {
          agent: {
            ...measured.agent,
            publishes: Object.fromEntries(publishes.map((m) => [m[1] ?? '', Number(m[2])])),
          },
        }
      : {
          agent: null,
          agentSkipped: 'run with --no-cluster: only the agents that do not publish were measured',
        }),
    agentNoPublish: measured.agentNoPublish,
    agentNoPublishWithoutNodeOptions: measured.agentNoPublishNoFlags,
    nodeExporter: ne,
    ratioToNodeExporter: {
      agent: measured.agent ? ratios(measured.agent) : null,
      agentNoPublish: ratios(measured.agentNoPublish),
      agentNoPublishWithoutNodeOptions: ratios(measured.agentNoPublishNoFlags),
    },
  };
  writeFileSync(
    join(REPO_ROOT, 'bench', 'results', 'agent-overhead.json'),
    `${JSON.stringify(result, null, 2)}\n`,
  );
  for (const [name, m] of Object.entries(measured)) {
    console.log(
      `${name.padEnd(22)} ${m.cpuPercent.toFixed(2).padStart(5)}% CPU  ${m.peakRssMiB.toFixed(1).padStart(5)} MiB RSS (anon ${m.anonRssMiB}, file ${m.fileRssMiB})  vs node_exporter: CPU ${ratio(m.cpuPercent, ne.cpuPercent)}x, RSS ${ratio(m.peakRssMiB, ne.peakRssMiB)}x`,
    );
  }
  if (result.agent)
    console.log(`publishing agent wrote ${JSON.stringify(result.agent.publishes)} in ${SECONDS}s`);
} finally {
  await processes.stop();
  await cleanup.run();
  rmSync(dir, { recursive: true, force: true });
}
