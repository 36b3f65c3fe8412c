// The live reads a pass makes of a node's running pods (the cache keeps only Pending ones), only where a decision
// needs them: which rollouts run on a saturated node, and where the claims of a pod that may move are bound.
import { rolloutOf, type NodeView } from '../../detection/index.js';
import { describeError } from '../../ports/errors.js';
import { matchesTerms } from '../../policy/node-affinity.js';
import type { MeasuredPod } from '../../detection/index.js';
import type { SandboxPolicySpec } from '../../api/v1alpha1/index.js';
import type { Logger } from '../../observability/log.js';
import type { ClusterCache, WorkloadReader } from '../../ports/cluster.js';
import type { NodeObservation, PolicyMemory } from '../policy-memory.js';

/** What the live reads need of a pass: the reader, the cache's nodes, a logger. */
interface LiveDeps {
  cache: Pick<ClusterCache, 'nodes'>;
  workloads?: WorkloadReader | undefined;
  logger: Logger;
}

/** What the live reads read and fill in of a node's observation (a draft, before its detection status). */
type LiveObservation = Pick<NodeObservation, 'node' | 'io' | 'ioHeavyPods' | 'runningRollouts'>;

/** How long the rollouts running on a node are taken as read: a rollout's pods move in minutes, not seconds. */
const RUNNING_ROLLOUTS_TTL_MS = 15_000;

/**
 * Which rollouts run a pod on a saturated node, for a policy that throttles rollouts: such a rollout's new pods may
 * land there (rollout-throttler). A live read (the cache keeps only Pending pods), at most once per
 * RUNNING_ROLLOUTS_TTL_MS per node; a failed read leaves it unknown, and no rollout is held for running there.
 */
export async function readRunningRollouts(
  deps: LiveDeps,
  request: { policy: string; spec: SandboxPolicySpec; now: Date },
  observation: LiveObservation,
  memory: PolicyMemory,
): Promise<void> {
  const state = memory.state(observation.node.name);
  if (
    !request.spec.remediation.throttleRollouts ||
    observation.io?.condition.status !== 'True' ||
    !deps.workloads
  ) {
    delete state.rollouts;
    return;
  }
  const now = request.now.getTime();
  if (!state.rollouts || now - state.rollouts.at >= RUNNING_ROLLOUTS_TTL_MS) {
    try {
      const pods = await deps.workloads.runningPodsOn(observation.node.name, {});
      const keys = new Set(pods.flatMap((p) => rolloutOf(p)?.key ?? []));
      state.rollouts = { at: now, keys };
    } catch (err) {
      deps.logger.warn('Failed to list the pods of a node to find the rollouts that run there', {
        policy: request.policy,
        node: observation.node.name,
        error: describeError(err),
      });
      delete state.rollouts;
      return;
    }
  }
  observation.runningRollouts = state.rollouts.keys;
}

/**
 * Which claims of the node's pods that may move are bound to the node: those whose volume admits no other node the
 * cache knows (a local PersistentVolume). Read only for those pods; one that cannot be read stays unresolved, and the
 * pod is not moved (guardData).
 */
export async function resolveClaims(
  deps: LiveDeps,
  policy: string,
  observation: LiveObservation,
  memory: PolicyMemory,
): Promise<void> {
  const reader = deps.workloads;
  const node = observation.node.name;
  const state = memory.state(node);
  if (!reader || !observation.ioHeavyPods.some((p) => (p.data?.claims.length ?? 0) > 0)) {
    delete state.claims;
    return;
  }
  // A pod's claims are bound once and for all: read once per pod while it is a candidate, one pod at a time.
  const known = new Map<string, string[]>();
  let others: NodeView[] | undefined;
  const resolved: MeasuredPod[] = [];
  for (const pod of observation.ioHeavyPods) {
    const data = pod.data;
    if (!data || data.claims.length === 0 || data.nodeBoundClaims) {
      resolved.push(pod);
      continue;
    }
    let nodeBoundClaims = state.claims?.get(pod.uid);
    if (!nodeBoundClaims)
      try {
        others ??= [...deps.cache.nodes()].filter((n) => n.name !== node);
        const admitted = others;
        const placements = await reader.claimPlacements(pod.namespace, data.claims);
        nodeBoundClaims = placements
          .filter((p) => p.nodeTerms && !admitted.some((n) => matchesTerms(p.nodeTerms, n)))
          .map((p) => p.claim);
      } catch (err) {
        deps.logger.warn('Failed to read where the claims of a Pod are bound', {
          policy,
          node,
          pod: `${pod.namespace}/${pod.name}`,
          error: describeError(err),
        });
        resolved.push(pod);
        continue;
      }
    known.set(pod.uid, nodeBoundClaims);
    resolved.push({ ...pod, data: { ...data, nodeBoundClaims } });
  }
  state.claims = known;
  observation.ioHeavyPods = resolved;
}

/**
 * Whether a node needs a live read this pass (resolveClaims, readRunningRollouts); what the reads kept of one that does
 * not is forgotten here, as they would forget it.
 */
export function needsLiveReads(
  spec: SandboxPolicySpec,
  observation: LiveObservation,
  memory: PolicyMemory,
): boolean {
  const claims = observation.ioHeavyPods.some((p) => (p.data?.claims.length ?? 0) > 0);
  const rollouts =
    spec.remediation.throttleRollouts !== undefined && observation.io?.condition.status === 'True';
  if (claims || rollouts) return true;
  const state = memory.nodes.get(observation.node.name);
  if (state) {
    delete state.claims;
    delete state.rollouts;
  }
  return false;
}
