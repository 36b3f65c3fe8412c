// The shape of `sandbox-remediator diagnose -o json`. schemas/diagnosis.schema.json is generated from it (make
// manifests) for scripts that read the output; the unit tests validate real output against that file.
import { z } from 'zod';
import {
  IoCauseSchema,
  IoLimitRatesSchema,
  ACTION_KINDS,
  ROLLOUT_KINDS,
  ActionRecordSchema,
  ConditionSchema,
  DeviceReadingSchema,
  DStateTaskSchema,
  FailureCauseSchema,
  IoReadingSchema,
  IoThresholdsSchema,
  NodeStateSchema,
  PAUSE_REASONS,
  PolicyProblemSchema,
  RemediationRecordSchema,
  StuckPodSchema,
} from '../api/v1alpha1/index.js';

const time = () => z.iso.datetime();
const ageSeconds = () =>
  z
    .int()
    .describe(
      'Seconds from the time beside it to generatedAt (negative when it lies ahead: a clock ahead, or a deadline).',
    );

export const FailureEventSchema = z
  .object({
    count: z.int().min(1).describe('Occurrences kubelet folded into the Event.'),
    lastTime: time().describe('Its latest occurrence.'),
    ageSeconds: ageSeconds(),
    message: z.string().describe('The latest message (its head).'),
  })
  .describe("The pod's latest FailedCreatePodSandBox Event.");

export const DiagnosedStuckPodSchema = StuckPodSchema.omit({ lastFailureTime: true })
  .extend({
    waitingSeconds: ageSeconds(),
    reservedName: z
      .string()
      .optional()
      .describe(
        'For NameReserved: the sandbox name <pod>_<namespace>_<uid>_<attempt> whose reservation blocks, from the message.',
      ),
    latestEvent: FailureEventSchema.optional(),
  })
  .describe('A pod stuck creating its sandbox on the node (status.stuckPods), with its latest Event.');
export type DiagnosedStuckPod = z.infer<typeof DiagnosedStuckPodSchema>;

export const IoEvidenceSchema = z
  .object({
    reading: IoReadingSchema.pick({
      source: true,
      observedTime: true,
      psiSomeAvg10Percent: true,
      psiSomeAvg60Percent: true,
      psiFullAvg10Percent: true,
      diskBusyPercent: true,
      blockedProcesses: true,
      conditionTrue: true,
    })
      .extend({
        ageSeconds: ageSeconds().describe(
          "The reading's age, from the earlier of its own time and when the apiserver took it (the agent's clock can be ahead).",
        ),
        staleAfterSeconds: z
          .int()
          .optional()
          .describe(
            "Older than this it counts as unknown (the policy's staleAfterSeconds or 1.5 heartbeats).",
          ),
        stale: z.boolean().optional().describe('Whether the reading is older than staleAfterSeconds.'),
        devices: z.array(DeviceReadingSchema).describe('Per-device readings, busiest first.'),
        thresholds: IoThresholdsSchema.optional().describe(
          "The owning policy's thresholds (spec.ioPressure.thresholds, defaults applied).",
        ),
        over: z
          .array(z.string())
          .describe('Which known values reach their thresholds, e.g. "PSI some avg10 >= 40%".'),
      })
      .optional()
      .describe('status.ioReading; absent when there is none.'),
    pressure: z
      .object({
        observation: z.enum(['Over', 'Under', 'Unknown']),
        since: time(),
        sinceSeconds: ageSeconds(),
        exceeded: z.array(z.string()).optional(),
      })
      .optional()
      .describe('status.ioPressure: how long the readings have said Over, Under or Unknown.'),
    condition: ConditionSchema.optional().describe('The IoPressureHigh condition.'),
  })
  .describe('The IO evidence for the node.');

export const NodeEvidenceSchema = z
  .object({
    dStateTasks: z
      .array(DStateTaskSchema)
      .describe('Tasks in D state from the latest reading, runtime ones first.'),
    kworkerCpuPercent: z.number().optional().describe('CPU used by kworker threads (100 = one core).'),
  })
  .describe('Processes stuck in the kernel, from the latest reading.');

export const RuntimeSchema = z
  .object({
    version: z.string().describe('containerRuntimeVersion, e.g. containerd://1.6.0.'),
    predatesMountFix: z.boolean().optional().describe('Whether it lacks containerd 1.5.10 / 1.6.0 fixes.'),
    note: z.string().optional().describe('Advice about the version.'),
    from: z.enum(['status', 'node']).describe('status.runtime, or assessed here from the Node.'),
  })
  .describe('The container runtime against the releases with the fixes.');

export const OperatorEventSchema = z
  .object({
    type: z.string().describe('Normal or Warning.'),
    reason: z.string().describe('e.g. Cordoned, EvictedStuckPod, RemediationBlocked.'),
    message: z.string(),
    count: z.int().min(1),
    lastTime: time(),
    ageSeconds: ageSeconds(),
  })
  .describe('An Event the operator recorded on the Node.');

export const HeldRolloutSchema = z
  .object({
    kind: z.enum(ROLLOUT_KINDS),
    namespace: z.string(),
    name: z.string(),
    policy: z.string().describe('The policy that paused it (sandbox.remediator.io/paused-by).'),
    reason: z.enum(PAUSE_REASONS),
    since: time(),
    sinceSeconds: ageSeconds(),
    feedsThisNode: z.boolean().describe("Whether the policy's status says its pods were stuck on this node."),
  })
  .describe(
    'A rollout the operator holds: a Deployment or Rollout paused, a StatefulSet or DaemonSet frozen.',
  );

export const GatedPodSchema = z
  .object({
    namespace: z.string(),
    name: z.string(),
    policy: z.string().optional().describe('The policy whose gate it is.'),
    since: time(),
    sinceSeconds: ageSeconds(),
  })
  .describe('A pod held at the pacing scheduling gate.');

export const ActionSchema = ActionRecordSchema.extend({ ageSeconds: ageSeconds() });

export const NextStepSchema = z
  .object({
    action: z
      .enum([...ACTION_KINDS, 'Wait', 'Nothing', 'Unknown'])
      .describe(
        'What the operator does next: an action kind, Wait (for evidence or time), Nothing, or Unknown (status does not say).',
      ),
    text: z.string().describe('In words, with the condition it waits for.'),
    notBefore: time().optional().describe('The earliest time it can happen, where status gives one.'),
  })
  .describe("The operator's next step for the node, derived from status (never guessed).");
export type NextStep = z.infer<typeof NextStepSchema>;

export const BlockerSchema = z
  .object({
    source: z
      .enum(['Guard', 'Condition', 'Policy'])
      .describe('Guard: status.blocked. Condition: a node condition. Policy: the owning SandboxPolicy.'),
    name: z.string().describe('The guard, condition reason or policy problem, one CamelCase word.'),
    message: z.string(),
    since: time().optional(),
  })
  .describe('Something that holds the operator back on this node.');
export type Blocker = z.infer<typeof BlockerSchema>;

export const PolicySummarySchema = z
  .object({
    name: z.string(),
    found: z.boolean().describe('Whether the SandboxPolicy exists.'),
    valid: z.boolean().optional().describe('Whether its spec is valid.'),
    problems: z.array(PolicyProblemSchema).describe('Every validation problem, when invalid.'),
    dryRun: z.boolean().optional().describe('spec.safety.dryRun, or the Active condition says DryRun.'),
    paused: z.boolean().optional().describe('spec.safety.paused.'),
    stormDetected: z.boolean().optional().describe('The StormDetected condition is True.'),
  })
  .describe('The SandboxPolicy that owns the node.');

export const ReadProblemSchema = z
  .object({ what: z.string(), message: z.string() })
  .describe('A read that failed; the rest of the diagnosis stands without it.');

export const NodeDiagnosisSchema = z
  .object({
    kind: z.literal('NodeDiagnosis'),
    node: z.string().describe('The node diagnosed.'),
    generatedAt: time().describe('When the diagnosis was made: every ageSeconds counts to this.'),
    found: z
      .object({ sandboxHealth: z.boolean(), node: z.boolean() })
      .describe('Which of the two objects exist.'),
    summary: z.string().describe('One line: state, stuck pods, IO evidence, what was done.'),
    state: NodeStateSchema.optional(),
    policy: PolicySummarySchema.optional(),
    stuckPods: z
      .object({
        count: z.int().min(0).describe('status.stuckPodCount.'),
        listed: z.array(DiagnosedStuckPodSchema).describe('The stuck pods status lists (at most 50).'),
        causes: z.array(z.object({ cause: FailureCauseSchema, count: z.int().min(0) })),
        ioEvidence: z.enum(['IoSuspected', 'NotIo', 'Inconclusive']).optional(),
        degraded: ConditionSchema.optional().describe('The SandboxCreationDegraded condition.'),
      })
      .describe('Pods stuck creating their sandbox.'),
    io: IoEvidenceSchema,
    ioCause: IoCauseSchema.optional().describe(
      "Who does the saturated device's IO (status.ioCause): the culprit first, and the remedy it calls for.",
    ),
    nodeEvidence: NodeEvidenceSchema,
    ioLimits: z
      .array(
        z.object({
          pod: z.string().describe('namespace/name.'),
          device: z.string().describe('MAJ:MIN.'),
          limit: IoLimitRatesSchema,
          state: z
            .enum(['Applied', 'Pending', 'Refused', 'NoCgroup', 'Failed', 'PodGone'])
            .describe("What the node agent's report says of it: applied as wanted, not yet, or why not."),
          since: z.string().describe('When the pod was first limited.'),
          exhausted: z
            .boolean()
            .describe('At its floor with the disk still saturated: handed to the next remedy.'),
          policy: z.string(),
        }),
      )
      .describe(
        "The IO limits the operator wants on the node's pods (spec.ioLimits, limitIo), and their state.",
      ),
    runtime: RuntimeSchema.optional(),
    done: z
      .object({
        unschedulable: z
          .boolean()
          .optional()
          .describe('spec.unschedulable of the Node; absent without a Node.'),
        cordonedByOperator: z.boolean().describe('Whether the stamps say the operator cordoned it.'),
        stamps: z
          .record(z.string(), z.string())
          .describe('The sandbox.remediator.io/* annotations on the Node.'),
        remediation: RemediationRecordSchema.optional(),
        lastAction: z.string().optional(),
        actions: z.array(ActionSchema).describe('status.actions, newest first.'),
        nodeEvents: z.array(OperatorEventSchema).describe("The operator's Events on the Node, newest first."),
        heldRollouts: z.array(HeldRolloutSchema),
        gatedPods: z.object({ count: z.int().min(0), oldest: z.array(GatedPodSchema) }),
        conditions: z.array(ConditionSchema).describe('Every condition of the SandboxHealth.'),
      })
      .describe('What the operator did.'),
    next: z.array(NextStepSchema).describe('What it does next.'),
    blocking: z.array(BlockerSchema).describe('What holds it back.'),
    unavailable: z.array(ReadProblemSchema),
  })
  .describe('`sandbox-remediator diagnose NODE`.');
export type NodeDiagnosis = z.infer<typeof NodeDiagnosisSchema>;

export const AttentionNodeSchema = z
  .object({
    node: z.string(),
    state: NodeStateSchema,
    policy: z.string().optional(),
    stuckPodCount: z.int().min(0),
    unschedulable: z.boolean().optional().describe('spec.unschedulable; absent when the Node is gone.'),
    cordonedByOperator: z.boolean(),
    io: z
      .object({ source: z.string(), observedTime: time(), ageSeconds: ageSeconds() })
      .optional()
      .describe('The latest IO reading.'),
    lastAction: z
      .object({ text: z.string(), time: time().optional(), ageSeconds: ageSeconds().optional() })
      .optional(),
    why: z.string().describe('Why it is listed.'),
  })
  .describe('A node that needs attention.');
export type AttentionNode = z.infer<typeof AttentionNodeSchema>;

export const ClusterOverviewSchema = z
  .object({
    kind: z.literal('ClusterOverview'),
    generatedAt: time(),
    summary: z.string().describe('One line, e.g. "all 12 nodes healthy".'),
    watchedNodes: z.int().min(0).describe('Nodes with a SandboxHealth.'),
    nodes: z.int().min(0).describe('Nodes in the cluster.'),
    unwatchedNodes: z
      .array(z.string())
      .describe(
        'Nodes without a SandboxHealth (no policy selects them, or the operator has not run), at most 20.',
      ),
    attention: z.array(AttentionNodeSchema).describe('Worst first.'),
    policies: z.array(PolicySummarySchema),
    unavailable: z.array(ReadProblemSchema),
  })
  .describe('`sandbox-remediator diagnose` without a node.');
export type ClusterOverview = z.infer<typeof ClusterOverviewSchema>;

export const DiagnosisSchema = z
  .discriminatedUnion('kind', [NodeDiagnosisSchema, ClusterOverviewSchema])
  .meta({ title: 'sandbox-remediator diagnose -o json' })
  .describe(
    'The output of `sandbox-remediator diagnose [NODE] -o json` (and `kubectl sandbox diagnose`): a NodeDiagnosis for one node, a ClusterOverview without one. Times are RFC 3339; every ageSeconds counts to generatedAt.',
  );
export type Diagnosis = z.infer<typeof DiagnosisSchema>;

/** The JSON Schema (draft 2020-12) published as schemas/diagnosis.schema.json. */
export function diagnosisJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(DiagnosisSchema, { io: 'output', unrepresentable: 'throw', reused: 'inline' });
}
