import { z } from 'zod';
import { LabelSelectorSchema } from './meta.js';

/** Upper bound of safety.maxEvictionsPerMinute, and so of the eviction log kept in status. */
export const MAX_EVICTIONS_PER_MINUTE = 600;
/** Upper bound of pacePodStarts.maxPodStartsPerMinute, and so of the gate-release log kept in status. */
export const MAX_POD_STARTS_PER_MINUTE = 600;

const seconds = (min: number, max: number) => z.int().min(min).max(max);
/** A culprit's share of the saturated device, as measuredIo and limitIo both judge it. */
const minSharePercent = () => z.int().min(1).max(100).default(25);

export const PacePodStartsSchema = z
  .strictObject({
    maxPodStartsPerMinute: z
      .int()
      .min(1)
      .max(MAX_POD_STARTS_PER_MINUTE)
      .default(10)
      .describe('Gates are lifted at most this often, oldest pod first, in any 60-second window.'),
    namespaceSelector: LabelSelectorSchema.describe(
      "Namespaces whose new pods are paced. Required: pacing every namespace is never a default. kube-system and the operator's namespace are never paced.",
    ),
    maxGateSeconds: seconds(10, 3_600)
      .default(600)
      .describe(
        'A pod held longer than this is released anyway, with an Event: a gate we set never strands a pod.',
      ),
  })
  .describe(
    "Paces pod starts, for every kind of workload: while a node of the policy is IoPressureHigh, the operator's mutating webhook adds the scheduling gate sandbox.remediator.io/paced to new pods in the selected namespaces, and the operator lifts the gates at a set rate. The webhook fails open: with the operator down, pods are created ungated.",
  );

export const EscalationSchema = z
  .strictObject({
    afterSeconds: seconds(60, 604_800).describe(
      "A node still IoPressureHigh this long after the operator fenced it (cordoned or tainted) with no stuck pod left that it may move gets the Node condition's reason RemediationExhausted, a Warning Event and a metric, so NodeHealthCheck or MachineHealthCheck can reboot or replace it. Nothing more is done by this operator.",
    ),
  })
  .describe('Escalation past this operator: off when absent.');

export const MigrateWorkloadsSchema = z
  .strictObject({
    by: z
      .enum(['labels', 'measuredIo'])
      .default('labels')
      .describe(
        "labels: move the running pods podSelector selects. measuredIo: move the pods the node's reading measures as culprits (the agent's cgroup counters, or Prometheus' cAdvisor series: a share of the saturated device's IO of at least minSharePercent, held for ioPressure.sustainSeconds); podSelector, if given, restricts which may move.",
      ),
    podSelector: LabelSelectorSchema.optional().describe(
      'Selects the IO-heavy pods to move off a saturated node (by labels: required), or the pods that may be moved (by measuredIo: optional). Must not be empty: an empty selector would select every pod.',
    ),
    minSharePercent: minSharePercent().describe(
      "by measuredIo: a pod is a culprit with at least this share of the saturated device's bytes or operations.",
    ),
    maxPodsPerNode: z
      .int()
      .min(1)
      .max(1_000)
      .default(2)
      .describe('At most this many selected pods are evicted from one node per remediation.'),
    evictLocalStoragePods: z
      .boolean()
      .default(false)
      .describe(
        "Also move pods with local storage (an emptyDir not backed by memory, a hostPath, a generic ephemeral volume), whose data stays behind and is lost, as the descheduler's evictLocalStoragePods and kubectl drain's --delete-emptydir-data do. Off: such a pod is never moved, and the block says which volumes hold it. A pod whose PersistentVolume is bound to the node (a local volume) is never moved: it could not start anywhere else.",
      ),
    evictSystemCriticalPods: z
      .boolean()
      .default(false)
      .describe(
        'Also move pods of a system-critical priority (system-cluster-critical, system-node-critical, or a priority of 2000000000 and more). Off: such a pod is never moved.',
      ),
  })
  .describe(
    "Moves IO-heavy running pods off a saturated node through the Eviction API: those selected by label, or those measured as doing its IO. Never DaemonSet, static or bare pods, pods labelled sandbox.remediator.io/no-migrate=true, pods in kube-system or the operator's namespace, pods a PodDisruptionBudget protects, pods whose data would be lost or that could not start elsewhere (see evictLocalStoragePods), or system-critical pods (see evictSystemCriticalPods). Stuck pods never started, hold no data, and are evicted whatever their volumes.",
  );
export type MigrateWorkloads = z.infer<typeof MigrateWorkloadsSchema>;

/** Upper bound of limitIo.maxLimitsPerMinute. */
export const MAX_IO_LIMITS_PER_MINUTE = 600;

export const LimitIoFloorSchema = z
  .strictObject({
    bytesPerSecond: z
      .int()
      .min(65_536)
      .max(1_099_511_627_776)
      .default(1_048_576)
      .describe(
        'No read or write bandwidth limit goes below this many bytes per second, whatever the pod did: enough for its probes, its log and a small fsync. Default 1 MiB/s.',
      ),
    opsPerSecond: z
      .int()
      .min(10)
      .max(10_000_000)
      .default(50)
      .describe('No read or write operations limit goes below this many per second, whatever the pod did.'),
    percent: z
      .int()
      .min(1)
      .max(100)
      .default(10)
      .describe(
        'No limit goes below this percentage of what the pod did when it was first limited (each of the four rates apart). At most startPercent.',
      ),
  })
  .describe(
    "The lowest a pod's limit is stepped down to, set with its first limit: per rate, the larger of percent of what the pod did then and the absolute minimum. A pod limited to its floor with its node still saturated is handed to the next remedy the policy allows (migrateWorkloads, if the pod may move).",
  );

export const LimitIoSchema = z
  .strictObject({
    minSharePercent: minSharePercent().describe(
      "A pod is limited with at least this share of the saturated device's bytes or operations (as migrateWorkloads.by measuredIo measures it).",
    ),
    startPercent: z
      .int()
      .min(1)
      .max(99)
      .default(50)
      .describe('The first limit: this percentage of what the pod reads and writes when it is limited.'),
    stepPercent: z
      .int()
      .min(1)
      .max(99)
      .default(50)
      .describe(
        "Each step down: this percentage of the limit before it, never under the floor. A step is taken when the node's IO pressure has not fallen below its thresholds sustainSeconds after the last limit.",
      ),
    floor: LimitIoFloorSchema.prefault({}),
    sustainSeconds: seconds(5, 3_600)
      .default(30)
      .describe(
        "How long a limit is given to work before the next step, while the node's IO pressure lasts.",
      ),
    recoverySeconds: seconds(5, 3_600)
      .default(60)
      .describe(
        'A limit is lifted once the pod has wanted no more than it this long: every rate under 90 % of its limit, and its own IO pressure (cgroup v2) under podPsiPercent.',
      ),
    podPsiPercent: z
      .int()
      .min(1)
      .max(100)
      .default(10)
      .describe(
        'A limited pod whose own IO pressure (cgroup v2 io.pressure, some avg10) is at least this wants more than its limit: it is not lifted for recovery. cgroup v1 has no per-pod pressure: its rates alone say.',
      ),
    cooldownSeconds: seconds(0, 86_400)
      .default(300)
      .describe('A pod is limited again no sooner than this after its last limit was lifted: no flapping.'),
    maxLimitSeconds: seconds(60, 604_800)
      .default(3_600)
      .describe(
        'A limit is lifted this long after it was first set, whatever the pressure: a limit never stays for good.',
      ),
    maxLimitsPerMinute: z
      .int()
      .min(1)
      .max(MAX_IO_LIMITS_PER_MINUTE)
      .default(10)
      .describe(
        'Limits set or stepped, across all nodes of the policy, in any 60-second window (lifts are never held back). Counts against no eviction budget.',
      ),
  })
  .describe(
    "Limits the IO of the pods that saturate a node's disk, in place, so the runtime can create sandboxes again without moving them: while the node is IoPressureHigh with sandboxes stuck from an IO cause, each culprit pod gets a limit on the saturated device (cgroup v2 io.max, cgroup v1 blkio.throttle.*_device), stepped down while the pressure lasts and lifted exactly (the file gets back what it held, if it still holds our limit) once the pod no longer needs it, the pod or the policy is gone, or maxLimitSeconds pass. Every kind of pod, DaemonSet and local-storage pods included; never one labelled sandbox.remediator.io/no-limit=true or the operator's own. The node's agent writes the files, and only when it runs with --allow-io-limits; each limited pod carries the annotations sandbox.remediator.io/io-limited-by, io-limit (io.max's line per device), io-limited-since and io-limited-uid from before its limit is asked for until it is lifted. Present means on. With migrateWorkloads.by measuredIo too, a culprit is moved only once its limit is exhausted (at the floor, the node still saturated) or could not be applied, or when it is labelled no-limit.",
  );
export type LimitIo = z.infer<typeof LimitIoSchema>;
