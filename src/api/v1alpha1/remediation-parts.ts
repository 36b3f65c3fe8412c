import { z } from 'zod';
import { LabelSelectorSchema } from './meta.js';

/** Upper bound of safety.maxEvictionsPerMinute, and so of the eviction log kept in status. */
export const MAX_EVICTIONS_PER_MINUTE = 600;
/** Upper bound of pacePodStarts.maxPodStartsPerMinute, and so of the gate-release log kept in status. */
export const MAX_POD_STARTS_PER_MINUTE = 600;

const seconds = (min: number, max: number) => z.int().min(min).max(max);

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
    minSharePercent: z
      .int()
      .min(1)
      .max(100)
      .default(25)
      .describe(
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
