import { z } from 'zod';
import { ConditionsSchema, IntOrPercentSchema, LabelSelectorSchema } from './meta.js';
import { NodeConditionSourceSchema, PrometheusSourceSchema } from './io-sources.js';
import {
  EscalationSchema,
  LimitIoSchema,
  MAX_EVICTIONS_PER_MINUTE,
  MAX_POD_STARTS_PER_MINUTE,
  MigrateWorkloadsSchema,
  PacePodStartsSchema,
} from './remediation-parts.js';
import { ROLLOUT_KINDS } from './stamps.js';

export {
  LimitIoSchema,
  MAX_EVICTIONS_PER_MINUTE,
  MAX_IO_LIMITS_PER_MINUTE,
  MAX_POD_STARTS_PER_MINUTE,
  MigrateWorkloadsSchema,
  PacePodStartsSchema,
  type LimitIo,
  type MigrateWorkloads,
} from './remediation-parts.js';

/** Nodes listed in status.overlappingNodes; status.overlappingNodeCount has the full count. */
export {
  CredentialSourceSchema,
  NodeConditionSourceSchema,
  PrometheusSourceSchema,
  SERIES_SELECTOR,
  type CredentialSource,
} from './io-sources.js';

export const MAX_LISTED_OVERLAPS = 100;

const seconds = (min: number, max: number) => z.int().min(min).max(max);
const percent = () => z.number().min(0).max(100);

export const IO_SOURCES = ['agent', 'prometheus', 'kubeletSummary', 'nodeCondition'] as const;
export type IoSourceKind = (typeof IO_SOURCES)[number];

export const DetectionSpecSchema = z
  .strictObject({
    stuckThresholdSeconds: seconds(1, 86_400)
      .default(180)
      .describe(
        'How long a scheduled pod must wait in ContainerCreating (or PodInitializing, CreateContainerError, RunContainerError) before it counts as stuck.',
      ),
    minStuckPods: z
      .int()
      .min(1)
      .max(10_000)
      .default(1)
      .describe('How many stuck pods a node needs before it is reported SandboxCreationDegraded.'),
  })
  .describe('How stuck sandboxes are recognised.');

export const IoThresholdsSchema = z
  .strictObject({
    psiSomeAvg10Percent: percent()
      .default(40)
      .describe(
        'IO pressure when /proc/pressure/io "some avg10" (share of time at least one task stalled on IO) reaches this.',
      ),
    psiFullAvg10Percent: percent()
      .default(20)
      .describe(
        'IO pressure when /proc/pressure/io "full avg10" (share of time all non-idle tasks stalled on IO) reaches this.',
      ),
    diskBusyPercent: percent()
      .default(90)
      .describe(
        'IO pressure when the busiest disk was busy (io_ticks) at least this share of the sample interval.',
      ),
    blockedProcesses: z
      .int()
      .min(1)
      .max(100_000)
      .default(8)
      .describe('IO pressure when at least this many tasks are blocked on IO (procs_blocked, D state).'),
  })
  .describe(
    'A node is under IO pressure when ANY known reading reaches its threshold; unknown readings never count.',
  );

export const IoPressureSpecSchema = z
  .strictObject({
    source: z
      .enum(IO_SOURCES)
      .default('agent')
      .describe(
        "Where IO readings come from: agent (this project's DaemonSet), prometheus (node_exporter via PromQL), kubeletSummary (PSI from the kubelet Summary API) or nodeCondition.",
      ),
    prometheus: PrometheusSourceSchema.optional(),
    nodeCondition: NodeConditionSourceSchema.prefault({}),
    thresholds: IoThresholdsSchema.prefault({}),
    sustainSeconds: seconds(0, 3_600)
      .default(30)
      .describe('A threshold must be exceeded for this long before the node is IoPressureHigh.'),
    recoverySeconds: seconds(0, 86_400)
      .default(120)
      .describe(
        'Readings must stay below every threshold for this long before the node counts as recovered.',
      ),
    staleAfterSeconds: seconds(5, 3_600)
      .default(90)
      .describe('A reading older than this is unknown; the operator never acts on unknown readings.'),
  })
  .describe('How IO pressure is read and judged.');

export const TaintSpecSchema = z
  .strictObject({
    key: z
      .string()
      .min(1)
      .default('sandbox.remediator.io/io-pressure')
      .describe(
        "Taint key, a qualified name under sandbox.remediator.io/: the operator's admission policy (config/rbac) lets it add or remove no other taint.",
      ),
    value: z.string().max(63).default('true').describe('Taint value (a label value).'),
    effect: z
      .enum(['NoSchedule', 'PreferNoSchedule'])
      .default('NoSchedule')
      .describe(
        'Taint effect: NoSchedule keeps new pods off (a fence, like a cordon); PreferNoSchedule only discourages them. NoExecute is refused: the taint manager would evict every pod without a toleration at once, past maxEvictionsPerMinute, PodDisruptionBudgets and the pod guards.',
      ),
  })
  .describe('A taint to add to an IO-saturated node, removed again on recovery.');

export const ThrottleRolloutsSchema = z
  .strictObject({
    pauseDeployments: z
      .boolean()
      .default(true)
      .describe(
        'Hold rolling-out workloads with pods stuck on a saturated node (IO pressure proven, cordoned or not), of every kind: a Deployment or Argo Rollout paused (spec.paused), a StatefulSet frozen at its partition, a DaemonSet switched to OnDelete; given back exactly on recovery. The name is kept from when only Deployments were held.',
      ),
    maxConcurrentRollouts: z
      .int()
      .min(1)
      .max(1_000)
      .default(1)
      .describe(
        'While any node of the policy is IoPressureHigh or being remediated, at most this many rollouts in scope, of every kind together, may progress at once; the others are held and queued, and let go in the order they started.',
      ),
    pacePodStarts: PacePodStartsSchema.optional(),
    namespaceSelector: LabelSelectorSchema.optional().describe(
      "Namespaces whose rollouts (every kind) are throttled. When absent: every namespace. kube-system and the operator's own namespace are never throttled.",
    ),
  })
  .describe(
    'Slows rollouts so image pulls do not keep the disk saturated: Deployments, StatefulSets, DaemonSets, and Argo Rollouts when installed. Only what the operator held (stamped sandbox.remediator.io/paused-by, with the strategy it replaced) is ever given back; what its owner paused is never touched, and one its owner resumes or changes is left alone for cooldownSeconds.',
  );

export const RemediationSpecSchema = z
  .strictObject({
    cordon: z.boolean().default(true).describe('Mark an IO-saturated node unschedulable.'),
    taint: TaintSpecSchema.optional(),
    evictStuckPods: z
      .boolean()
      .default(true)
      .describe(
        'Evict pods stuck on the node (through the Eviction API, honouring PodDisruptionBudgets) so they are recreated elsewhere with a new sandbox name.',
      ),
    migrateWorkloads: MigrateWorkloadsSchema.optional(),
    limitIo: LimitIoSchema.optional(),
    throttleRollouts: ThrottleRolloutsSchema.optional(),
    requireIoPressure: z
      .boolean()
      .default(true)
      .describe(
        'Act only on a node that is both SandboxCreationDegraded from an IO cause and IoPressureHigh. False acts on the stuck-pod evidence alone (IO-caused stuck pods), for clusters with no IO source; recovery is then judged on stuck pods alone. Network, ImagePull and RuntimeHandler causes never trigger an action.',
      ),
    undoOnRecovery: z
      .boolean()
      .default(true)
      .describe('On recovery, undo what the operator did (uncordon, untaint, resume) and nothing else.'),
    nodeCondition: z
      .boolean()
      .default(true)
      .describe(
        'Write the condition SandboxCreationDegraded to the status of each node of this policy while it is IO-saturated with stuck sandboxes (True, reason IoSaturated or RemediationExhausted), and False with reason Recovered once it recovers, so NodeHealthCheck, MachineHealthCheck and other tools can see it. Its lastTransitionTime holds while the status does. False removes the condition from the nodes.',
      ),
    escalation: EscalationSchema.optional(),
  })
  .describe('What may be done to a node proven to be IO-saturated with stuck sandboxes.');

export const SafetySpecSchema = z
  .strictObject({
    maxUnhealthyNodes: IntOrPercentSchema.default('20%').describe(
      'Storm limit: when more selected nodes than this are degraded, nothing new is cordoned, tainted or evicted. A count, or a percentage of the selected nodes rounded down; a percentage above 0% allows at least one node, so that the one degraded node of a small cluster is fenced (20% of 4 nodes is 1). minSchedulableNodes still guards the capacity left.',
    ),
    minSchedulableNodes: z
      .int()
      .min(0)
      .max(100_000)
      .default(1)
      .describe('Never cordon a node if fewer than this many selected nodes would remain schedulable.'),
    maxEvictionsPerMinute: z
      .int()
      .min(0)
      .max(MAX_EVICTIONS_PER_MINUTE)
      .default(10)
      .describe(
        'Evictions (stuck and migrated pods) in any 60-second window across all nodes of this policy; 0 disables evictions. Counted from status.recentEvictions, so the limit holds across restarts.',
      ),
    cooldownSeconds: seconds(0, 86_400)
      .default(300)
      .describe(
        'After remediating or undoing on a node, wait this long before the next change to that node.',
      ),
    dryRun: z
      .boolean()
      .default(false)
      .describe('Decide and report (logs, Events, metrics, status) but change nothing.'),
    paused: z
      .boolean()
      .default(false)
      .describe('Detect and report but take no new actions and undo nothing.'),
    nodeLease: z
      .boolean()
      .default(false)
      .describe(
        'Take the medik8s node lease (Lease node-<node> in namespace medik8s-leases, holder sandbox-remediator-<policy>) while remediating a node, and release it on undo, so NodeHealthCheck and node-maintenance-operator wait for us. Whatever this says, a lease another holder holds blocks new actions on its node.',
      ),
  })
  .describe('Blast-radius limits, enforced in one place before any action.');

export const SandboxPolicySpecSchema = z
  .strictObject({
    nodeSelector: LabelSelectorSchema.optional().describe(
      'Nodes this policy watches. When absent: every node without the node-role.kubernetes.io/control-plane label. Nodes labelled sandbox.remediator.io/exclude=true are never selected.',
    ),
    detection: DetectionSpecSchema.prefault({}),
    ioPressure: IoPressureSpecSchema.prefault({}),
    remediation: RemediationSpecSchema.prefault({}),
    safety: SafetySpecSchema.prefault({}),
  })
  .describe('What to watch, how to judge it and what may be done about it.');
export type SandboxPolicySpec = z.infer<typeof SandboxPolicySpecSchema>;
/** The spec as a user may write it, before defaults. */
export type SandboxPolicySpecInput = z.input<typeof SandboxPolicySpecSchema>;

export const PolicyProblemSchema = z
  .strictObject({
    field: z.string().describe('Path of the offending field, e.g. spec.ioPressure.prometheus.url.'),
    message: z.string().describe('What is wrong with it.'),
  })
  .describe('One validation problem.');
export type PolicyProblem = z.infer<typeof PolicyProblemSchema>;

export const SandboxPolicyStatusSchema = z
  .strictObject({
    observedGeneration: z.int().min(0).optional().describe('The .metadata.generation this status reflects.'),
    conditions: ConditionsSchema.describe('Valid, Active and StormDetected.'),
    problems: z
      .array(PolicyProblemSchema)
      .max(100)
      .optional()
      .describe('Every validation problem found when Valid is False.'),
    matchedNodes: z.int().min(0).optional().describe('Nodes this policy selects and owns.'),
    degradedNodes: z.int().min(0).optional().describe('Selected nodes with stuck sandboxes.'),
    remediatingNodes: z.int().min(0).optional().describe('Selected nodes the operator is acting on.'),
    overlappingNodes: z
      .array(
        z
          .strictObject({
            node: z.string().describe('Node name.'),
            ownedBy: z.string().describe('The policy that owns the node instead.'),
          })
          .describe('A node this policy selects but another policy owns.'),
      )
      .max(MAX_LISTED_OVERLAPS)
      .optional()
      .describe(
        'Nodes this policy also selects but another, more specific or older, policy owns (at most 100 listed).',
      ),
    overlappingNodeCount: z
      .int()
      .min(0)
      .optional()
      .describe('How many nodes overlap, including those not listed in overlappingNodes.'),
    actionCount: z
      .int()
      .min(0)
      .optional()
      .describe(
        'Remediation actions taken (or, in a dry run, that would have been taken) since the policy was created.',
      ),
    blockedActionCount: z
      .int()
      .min(0)
      .optional()
      .describe('Actions a safety guard newly blocked since the policy was created.'),
    throttledRollouts: z
      .array(
        z
          .strictObject({
            kind: z
              .enum(ROLLOUT_KINDS)
              .optional()
              .describe(
                'Deployment, StatefulSet, DaemonSet or Rollout (Argo Rollouts); absent in entries written before kinds were named: a Deployment.',
              ),
            name: z.string().optional().describe('namespace/name.'),
            deployment: z
              .string()
              .optional()
              .describe('namespace/name of a Deployment, in entries written before kinds were named.'),
            reason: z
              .enum(['FeedsSaturatedNode', 'RolloutQueued'])
              .describe(
                'FeedsSaturatedNode: its pods were stuck on a node with proven IO pressure (cordoned or not). RolloutQueued: waiting its turn.',
              ),
            feeds: z
              .array(z.string())
              .max(20)
              .optional()
              .describe('The saturated nodes its pods were stuck on.'),
            since: z.iso.datetime().describe('When it was paused.'),
            dryRun: z.boolean().describe('Whether this pause is only what a dry run would have done.'),
          })
          .describe(
            'A rollout the operator holds: a Deployment or Rollout paused, a StatefulSet frozen at its partition, a DaemonSet switched to OnDelete.',
          ),
      )
      .max(MAX_LISTED_OVERLAPS)
      .optional()
      .describe(
        'Rollouts the operator holds, every kind in one queue order (oldest rollout first), at most 100 listed.',
      ),
    throttledRolloutCount: z
      .int()
      .min(0)
      .optional()
      .describe('How many rollouts the operator holds, of every kind.'),
    gatedPods: z.int().min(0).optional().describe('Pods held at the pacing gate now.'),
    recentGateReleases: z
      .array(z.iso.datetime())
      .max(MAX_POD_STARTS_PER_MINUTE)
      .optional()
      .describe(
        'When gates were lifted in the last 60 seconds: the basis of maxPodStartsPerMinute across restarts.',
      ),
    recentEvictions: z
      .array(z.iso.datetime())
      .max(MAX_EVICTIONS_PER_MINUTE)
      .optional()
      .describe(
        'When this policy evicted pods in the last 60 seconds, oldest first: the basis of maxEvictionsPerMinute across restarts. Each is the moment the eviction was answered; while evictions are under way they are counted from the latest moment they can be carried out (their request timeout), which may lie a little ahead.',
      ),
  })
  .describe('What the operator observed for this policy.');
export type SandboxPolicyStatus = z.infer<typeof SandboxPolicyStatusSchema>;
