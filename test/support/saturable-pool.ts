// A pool of kwok nodes under one policy, the first few of which can be saturated on demand: each has an agent of its
// own over a crafted /proc (ProcRoot: setPressure('load') makes it read IO pressure), for the rollout tests.
import { AgentProcess } from './agent-process.js';
import { Cleanup, createNamespace, createNodes, uniqueName } from './cluster.js';
import { FAST_IO, ProcRoot } from './proc-root.js';
import { applyPolicy } from './resources.js';

export const TEST_POOL = 'sandbox.remediator.io/test-pool';

export interface SaturableNode {
  namespace: string;
  pool: string;
  /** The node's name. */
  sick: string;
  policy: string;
  proc: ProcRoot;
}

/**
 * `size` nodes and a namespace, a policy over them (fast detection and IO settings, then `spec` over the top) named
 * `prefix`-<random>, and an agent on each of the first `sickCount` nodes.
 */
export async function saturablePool(
  cleanup: Cleanup,
  spec: Record<string, unknown>,
  { size = 3, sickCount = 1, prefix = 'it-rollouts' } = {},
): Promise<SaturableNode[]> {
  const namespace = await createNamespace(cleanup);
  const { pool, names } = await createNodes(cleanup, size);
  const policy = uniqueName(prefix);
  await applyPolicy(cleanup, policy, {
    nodeSelector: { matchLabels: { [TEST_POOL]: pool } },
    detection: { stuckThresholdSeconds: 3 },
    ioPressure: FAST_IO,
    safety: { maxUnhealthyNodes: 1, cooldownSeconds: 5 },
    ...spec,
  });
  const sick: SaturableNode[] = [];
  for (const node of names.slice(0, sickCount)) {
    const proc = new ProcRoot();
    cleanup.add(() => proc.remove());
    const agent = new AgentProcess();
    cleanup.add(() => agent.stop());
    agent.start(node, [
      `--proc-root=${await proc.create()}`,
      '--interval-seconds=1',
      '--heartbeat-seconds=3',
    ]);
    sick.push({ namespace, pool, sick: node, policy, proc });
  }
  return sick;
}
