import { isDeepStrictEqual } from 'node:util';
import { findPodOfEvent, type PodView } from '../../detection/index.js';
import { comparePolicies, selectsNode, validPolicies } from '../node-assignment.js';
import type { Change, ClusterCache } from '../../ports/cluster.js';

/** The valid policy that owns a node right now, if any. */
export function ownerOf(cache: ClusterCache, nodeName: string): string | undefined {
  const node = cache.node(nodeName);
  if (!node) return undefined;
  return validPolicies(cache.policies())
    .filter((p) => selectsNode(p.spec, node))
    .sort(comparePolicies)[0]?.name;
}

/**
 * The node a change is about; null when it touches no node's state (rollouts and namespaces matter to rollout
 * throttling, which reads them every pass). A policy change marks no node either: a new spec (generation) or a
 * change of ownership already makes the next pass a full one, and the rest of a policy change is its status —
 * our own write, coming back on every pass of an incident, which must not turn each next pass into a full one.
 * An Event about a pod the cache does not hold (not Pending, or not yet seen) marks nothing: when the pod shows
 * up, its own change marks its node, and the Event is read then.
 */
export function nodeOf(change: Change, podByUid: (uid: string) => PodView | undefined): string | null {
  switch (change.kind) {
    case 'SandboxPolicy':
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'Rollout':
    case 'Namespace':
    case 'GatedPod':
      return null;
    case 'Node':
    case 'NodeLease':
      return change.key;
    case 'Pod':
      return change.pod.nodeName ?? null;
    case 'Event':
      return findPodOfEvent(change.event, podByUid)?.nodeName ?? null;
    case 'SandboxHealth':
      return change.health.nodeName ?? change.key;
  }
}

/**
 * Maps a cache change to the policies to reconcile, dropping noise early (STYLE principle 2): pods and
 * events enqueue the policy owning their node; node and policy changes can move ownership, so they enqueue
 * every policy; SandboxHealth changes are the operator's own writes, except a deletion.
 */
export function policiesFor(
  change: Change,
  cache: ClusterCache,
  podByUid: (uid: string) => PodView | undefined,
): string[] {
  const all = () => [
    ...new Set([
      ...[...cache.policies()].map((p) => p.name),
      ...(change.kind === 'SandboxPolicy' ? [change.key] : []),
    ]),
  ];
  const forNode = (node: string | undefined) => {
    const owner = node ? ownerOf(cache, node) : undefined;
    return owner ? [owner] : [];
  };
  switch (change.kind) {
    case 'SandboxPolicy':
    case 'Node':
      return all();
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'Rollout':
    case 'Namespace':
      // Only policies that throttle rollouts read them.
      return validPolicies(cache.policies())
        .filter((p) => p.spec.remediation.throttleRollouts !== undefined)
        .map((p) => p.name);
    case 'GatedPod':
      // The policy that gated it releases it (a gone policy's pods are released by the next policy to look).
      return change.pod.policy && cache.policy(change.pod.policy) ? [change.pod.policy] : all();
    case 'NodeLease':
      // Held or let go by another (a guard on its node), or our own write of it coming back.
      return forNode(change.key);
    case 'Pod':
      return forNode(change.pod.nodeName);
    case 'Event':
      return forNode(findPodOfEvent(change.event, podByUid)?.nodeName);
    case 'SandboxHealth':
      // The operator's own writes are noise; a deletion (recreate it) or a new agent reading are not.
      if (change.type === 'delete') return forNode(change.health.nodeName ?? change.key);
      // Readings of polled sources are the operator's own writes too: only the agent's arrive this way.
      return change.health.status?.ioReading?.source === 'agent' &&
        !isDeepStrictEqual(change.health.status.ioReading, change.previous?.status?.ioReading)
        ? forNode(change.health.nodeName ?? change.key)
        : [];
  }
}
