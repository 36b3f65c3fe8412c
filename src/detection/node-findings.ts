import { IO_CAUSES, NON_IO_CAUSES, type FailureCause } from './classify.js';
import type { StuckPod } from './stuck-pods.js';

export type IoEvidence = 'IoSuspected' | 'NotIo' | 'Inconclusive';

export interface NodeFindings {
  nodeName: string;
  /** Longest-waiting first. */
  stuckPods: StuckPod[];
  causes: Map<FailureCause | 'Unknown', number>;
  evidence: IoEvidence;
  /** At least minStuckPods stuck pods. */
  degraded: boolean;
}

/**
 * Whether the failures point at IO: IO causes (NameReserved, DeadlineExceeded) at least as common as
 * causes known to be elsewhere (CNI, image pulls, runtime handler). Unclassified failures count for neither.
 */
export function judgeEvidence(causes: ReadonlyMap<FailureCause | 'Unknown', number>): IoEvidence {
  let io = 0;
  let elsewhere = 0;
  for (const [cause, count] of causes) {
    if (cause === 'Unknown') continue;
    if (IO_CAUSES.has(cause)) io += count;
    else if (NON_IO_CAUSES.has(cause)) elsewhere += count;
  }
  if (io > 0 && io >= elsewhere) return 'IoSuspected';
  if (elsewhere > 0) return 'NotIo';
  return 'Inconclusive';
}

/** Groups stuck pods by node. Nodes in `nodeNames` without stuck pods get healthy findings. */
export function detectNodeFindings(
  stuckPods: Iterable<StuckPod>,
  nodeNames: Iterable<string>,
  minStuckPods: number,
): Map<string, NodeFindings> {
  const byNode = new Map<string, StuckPod[]>();
  for (const name of nodeNames) byNode.set(name, []);
  for (const pod of stuckPods) byNode.get(pod.nodeName)?.push(pod);

  const findings = new Map<string, NodeFindings>();
  for (const [nodeName, pods] of byNode) {
    pods.sort(
      (a, b) =>
        b.waitedSeconds - a.waitedSeconds ||
        a.pod.namespace.localeCompare(b.pod.namespace) ||
        a.pod.name.localeCompare(b.pod.name),
    );
    const causes = new Map<FailureCause | 'Unknown', number>();
    for (const pod of pods) causes.set(pod.cause, (causes.get(pod.cause) ?? 0) + 1);
    findings.set(nodeName, {
      nodeName,
      stuckPods: pods,
      causes,
      evidence: judgeEvidence(causes),
      degraded: pods.length >= minStuckPods,
    });
  }
  return findings;
}
