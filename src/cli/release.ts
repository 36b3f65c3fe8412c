// `sandbox-remediator release TARGET` (kubectl sandbox release): a person takes over a node or a rollout the operator
// holds. kubectl skips a cordon or a pause already in place, and the apiserver records no manager for a patch that
// changes nothing, so the operator cannot tell a person's cordon from its own: the handover is explicit. Our stamps
// are dropped and the object is left exactly as it is (cordoned, tainted, paused, held at its partition): the
// operator no longer undoes it, and the person ends it when they are done. An Event on the object says so.
import {
  formatTaint,
  heldStrategyAnnotations,
  isRolloutKind,
  rolloutStampAnnotations,
  stampAnnotations,
  type RolloutKind,
} from '../api/v1alpha1/index.js';
import type { NodeView, WorkloadView } from '../detection/index.js';
import { KubeconfigError, loadKubeConfig } from '../kube/client.js';
import { KubeCleanupReads, KubeCleanupWriter } from '../kube/cleanup.js';
import { describeError, isConflict } from '../kube/errors.js';
import { KubeEventRecorder } from '../kube/writer.js';

export interface ReleaseFlags {
  kubeconfig?: string;
  context?: string;
}

type Out = { write(text: string): unknown };

/** What was named: a node (NAME or node/NAME), or a rollout as KIND/NAMESPACE/NAME. */
export type ReleaseTarget =
  { kind: 'Node'; name: string } | { kind: RolloutKind; namespace: string; name: string };

const KINDS: Record<string, RolloutKind> = {
  deployment: 'Deployment',
  statefulset: 'StatefulSet',
  daemonset: 'DaemonSet',
  rollout: 'Rollout',
};

export function parseReleaseTarget(text: string): ReleaseTarget | { problem: string } {
  const parts = text.split('/');
  if (parts.length === 1 && parts[0]) return { kind: 'Node', name: parts[0] };
  if (parts.length === 2 && parts[0]?.toLowerCase() === 'node' && parts[1])
    return { kind: 'Node', name: parts[1] };
  const [kind = '', namespace, name] = parts;
  const rolloutKind = KINDS[kind.toLowerCase()];
  if (parts.length === 3 && rolloutKind && isRolloutKind(rolloutKind) && namespace && name)
    return { kind: rolloutKind, namespace, name };
  return {
    problem: `"${text}" names no node (NAME, node/NAME) and no rollout (deployment|statefulset|daemonset|rollout/NAMESPACE/NAME)`,
  };
}

/** What the person is left with once our claim is dropped, and how they end it. */
export function nodeLeftAs(node: NodeView): string {
  const fences = [
    ...(node.unschedulable ? ['cordoned'] : []),
    ...(node.stamps?.taint ? [`tainted ${formatTaint(node.stamps.taint)}`] : []),
  ];
  const undo = [
    ...(node.unschedulable ? [`kubectl uncordon ${node.name}`] : []),
    ...(node.stamps?.taint ? [`kubectl taint node ${node.name} ${node.stamps.taint.key}-`] : []),
  ];
  return fences.length === 0
    ? 'It carries no fence of ours.'
    : `It stays ${fences.join(' and ')}; the operator will not undo it. When you are done: ${undo.join('; ')}.`;
}

export function workloadLeftAs(w: WorkloadView): string {
  const target = `${w.kind.toLowerCase()}/${w.name} -n ${w.namespace}`;
  switch (w.kind) {
    case 'Deployment':
    case 'Rollout':
      return w.paused
        ? `It stays paused; the operator will not resume it. When you are done: kubectl rollout resume ${target}${w.kind === 'Rollout' ? ' (or kubectl argo rollouts resume)' : ''}.`
        : 'It is not paused.';
    case 'StatefulSet':
    case 'DaemonSet':
      return w.held
        ? `Its updateStrategy stays as the hold left it; the operator will not restore it. It was ${JSON.stringify(w.held.strategy)}: kubectl patch ${target} --type merge -p '${JSON.stringify({ spec: { updateStrategy: w.held.strategy } })}'.`
        : 'It carries no hold of ours.';
  }
}

/** Exit status: 0 when released (or there was nothing of ours), 1 when it failed, 2 for a usage mistake. */
export async function runRelease(
  text: string,
  flags: ReleaseFlags,
  out: Out = process.stdout,
  err: Out = process.stderr,
): Promise<number> {
  const target = parseReleaseTarget(text);
  if ('problem' in target) {
    err.write(`release: ${target.problem}\n`);
    return 2;
  }
  let kc;
  try {
    kc = loadKubeConfig(flags.kubeconfig, {
      requestTimeoutMs: 15_000,
      ...(flags.context !== undefined ? { context: flags.context } : {}),
    });
  } catch (e) {
    if (!(e instanceof KubeconfigError)) throw e;
    err.write(`release: ${e.message}; pass --kubeconfig=<path>\n`);
    return 2;
  }
  const reads = new KubeCleanupReads(kc);
  const writer = new KubeCleanupWriter(kc);
  const recorder = new KubeEventRecorder(kc);
  const label =
    target.kind === 'Node'
      ? `node/${target.name}`
      : `${target.kind.toLowerCase()}/${target.namespace}/${target.name}`;
  try {
    // Read, then dropped on that version: a change meanwhile (409) is read again, twice at most.
    for (let attempt = 0; ; attempt++) {
      try {
        const released =
          target.kind === 'Node'
            ? await releaseNode(target.name, reads, writer)
            : await releaseWorkload(target, reads, writer);
        if (typeof released === 'string') {
          // After a 409 too: the operator may have undone its claim meanwhile; say what the object is now.
          out.write(`${label} carries no claim of sandbox-remediator: nothing to release. ${released}\n`);
          return 0;
        }
        const message = `Released by hand (sandbox-remediator release): the operator's claim is dropped. ${released.leftAs}`;
        await recorder
          .record({ target: released.ref, type: 'Normal', reason: 'RemediationReleased', message })
          .catch((e: unknown) => {
            err.write(`release: the Event was not recorded: ${describeError(e)}\n`);
          });
        out.write(`Released ${label} (held by policy ${released.policy}). ${released.leftAs}\n`);
        return 0;
      } catch (e) {
        if (!isConflict(e) || attempt >= 2) throw e;
      }
    }
  } catch (e) {
    err.write(`release: ${label}: ${describeError(e)}\n`);
    return 1;
  }
}

interface Released {
  policy: string;
  leftAs: string;
  ref:
    | { kind: 'Node'; name: string; uid: string }
    | { kind: RolloutKind; namespace: string; name: string; uid: string };
}

/** Drops our stamps from a node; when it carries none, what it is now. */
async function releaseNode(
  name: string,
  reads: KubeCleanupReads,
  writer: KubeCleanupWriter,
): Promise<Released | string> {
  const found = await reads.node(name);
  if (!found) throw new Error('no such node');
  const { view, version } = found;
  if (!view.stamps) return `It is ${view.unschedulable ? 'cordoned' : 'schedulable'}.`;
  await writer.patchNode({
    node: name,
    ...(version ? { resourceVersion: version } : {}),
    annotations: stampAnnotations(undefined, view.uid),
  });
  return { policy: view.stamps.policy, leftAs: nodeLeftAs(view), ref: { kind: 'Node', name, uid: view.uid } };
}

async function releaseWorkload(
  target: { kind: RolloutKind; namespace: string; name: string },
  reads: KubeCleanupReads,
  writer: KubeCleanupWriter,
): Promise<Released | string> {
  const found = await reads.workload(target.kind, target.namespace, target.name);
  if (!found) throw new Error(`no such ${target.kind}`);
  const { view, version } = found;
  if (!view.stamps) return `It is ${view.paused ? 'held' : 'not held'}.`;
  await writer.patchWorkload({
    ...target,
    ...(version ? { resourceVersion: version } : {}),
    annotations: { ...rolloutStampAnnotations(undefined, view.uid), ...heldStrategyAnnotations(undefined) },
  });
  return {
    policy: view.stamps.policy,
    leftAs: workloadLeftAs(view),
    ref: { ...target, uid: view.uid },
  };
}
