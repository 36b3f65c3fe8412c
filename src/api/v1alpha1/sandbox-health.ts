import { z } from 'zod';
import { IoAttributionSchema, IoCauseSchema } from './io-attribution.js';
import { IoLimitReportSchema, WantedIoLimitsSchema } from './io-limits.js';
import { ConditionsSchema, K8S_LIST_MAP_KEYS, K8S_LIST_TYPE } from './meta.js';

export const FAILURE_CAUSES = [
  'NameReserved',
  'DeadlineExceeded',
  'Network',
  'ImagePull',
  'RuntimeHandler',
  'Other',
  'Unknown',
] as const;
export const FailureCauseSchema = z
  .enum(FAILURE_CAUSES)
  .describe(
    'Classified cause: NameReserved and DeadlineExceeded point at a slow runtime (IO); Network, ImagePull and RuntimeHandler do not; Other is an unrecognised message; Unknown means no failure event was seen.',
  );

export const NODE_STATES = [
  'Healthy',
  'Degraded',
  'IoPressure',
  'Remediating',
  'Recovering',
  'Unknown',
] as const;
export const NodeStateSchema = z
  .enum(NODE_STATES)
  .describe(
    'Healthy: nothing stuck. Degraded: stuck sandboxes. IoPressure: stuck sandboxes and IO pressure proven. Remediating: the operator acted. Recovering: pressure gone, waiting recoverySeconds before undoing. Unknown: no data.',
  );
export type NodeState = z.infer<typeof NodeStateSchema>;

const time = () => z.iso.datetime();

/** Recent actions and blocked actions kept in a SandboxHealth status. */
export const MAX_RECORDED_ACTIONS = 20;

export const StuckPodSchema = z
  .object({
    namespace: z.string().describe('Pod namespace.'),
    name: z.string().describe('Pod name.'),
    uid: z.string().describe('Pod UID.'),
    waitingReason: z.string().describe('The container waiting reason, e.g. ContainerCreating.'),
    waitingSince: time().describe('When the pod was scheduled to the node (start of the wait).'),
    cause: FailureCauseSchema,
    failureCount: z
      .int()
      .min(0)
      .describe(
        "Failure events seen for the pod (the sum of their counts), rounded down to 1, 2, 5, 10, 20, 50, 100, ...: a lower bound that moves only at those steps, so kubelet's retries do not each rewrite this status. The pod's Events have the exact count and the latest time.",
      ),
    causeSince: time()
      .optional()
      .describe(
        'When the pod was first listed failing with its current cause (the latest failure Event time then). It moves when the cause changes, not with every retry.',
      ),
    // Kept in the schema so that an older replica's writes are not pruned during a rolling upgrade (pruned, they
    // would differ from its desired status on every pass, and it would write on every pass).
    lastFailureTime: time()
      .optional()
      .describe(
        'Deprecated, no longer written: it moved with every retry. See causeSince and the pod Events.',
      ),
    lastMessage: z
      .string()
      .max(1024)
      .optional()
      .describe(
        'A failure message of the current cause, as it was when the cause was set (kept while the cause holds: retries name new sandbox ids), truncated to 1 KiB. The pod Events have every message.',
      ),
    reservedFor: z
      .string()
      .optional()
      .describe('The sandbox id holding the name reservation, for NameReserved.'),
    runtime: z
      .enum(['containerd', 'cri-o', 'dockershim', 'windows'])
      .optional()
      .describe("The container runtime, when the failure message's wording is one only that runtime uses."),
  })
  .describe('A pod stuck creating its sandbox on this node.');
export type StuckPodStatus = z.infer<typeof StuckPodSchema>;

export const DStateTaskSchema = z
  .object({
    pid: z
      .int()
      .min(0)
      .describe(
        "Process id, or thread id for a container runtime's thread (its other threads are read too).",
      ),
    comm: z.string().describe('Command name (/proc/PID/comm).'),
    wchan: z.string().optional().describe('Kernel function the task waits in, e.g. do_mount.'),
    runtime: z
      .boolean()
      .describe('Whether the task belongs to the container runtime (runc, containerd, shim).'),
  })
  .describe('A task in uninterruptible sleep (D state).');

export const DeviceReadingSchema = z
  .object({
    name: z.string().describe('Block device name from /proc/diskstats.'),
    busyPercent: z.number().min(0).max(100).describe('Share of the interval the device had IO in flight.'),
    awaitMs: z.number().min(0).optional().describe('Average completion time per IO in the interval.'),
    inFlight: z.int().min(0).describe('IOs in flight at sample time.'),
  })
  .describe('One block device over the last sample interval.');

export const IoReadingSchema = z
  .object({
    source: z
      .string()
      .describe('Which source produced the reading: agent, prometheus, kubeletSummary, nodeCondition.'),
    observedTime: time().describe('When the reading was taken.'),
    heartbeatSeconds: z
      .int()
      .min(1)
      .max(3600)
      .optional()
      .describe(
        'The longest the writer (the node agent) goes without writing a reading: readers take a reading younger than 1.5 times this as current, even when the policy staleAfterSeconds is shorter.',
      ),
    psiSomeAvg10Percent: z.number().min(0).max(100).optional().describe('/proc/pressure/io some avg10.'),
    psiSomeAvg60Percent: z.number().min(0).max(100).optional().describe('/proc/pressure/io some avg60.'),
    psiFullAvg10Percent: z.number().min(0).max(100).optional().describe('/proc/pressure/io full avg10.'),
    diskBusyPercent: z.number().min(0).max(100).optional().describe('Busy share of the busiest disk.'),
    blockedProcesses: z.int().min(0).optional().describe('procs_blocked from /proc/stat.'),
    kworkerCpuPercent: z.number().min(0).optional().describe('CPU used by kworker threads (100 = one core).'),
    conditionTrue: z
      .boolean()
      .optional()
      .describe('For the nodeCondition source: whether the condition is True.'),
    devices: z.array(DeviceReadingSchema).max(32).optional().describe('Per-device readings, busiest first.'),
    dStateTasks: z
      .array(DStateTaskSchema)
      .max(32)
      .optional()
      .describe('Tasks in D state, runtime tasks first.'),
    attribution: IoAttributionSchema.optional(),
  })
  .describe('The latest IO reading for the node. A missing field is unknown, never zero.');
export type IoReadingStatus = z.infer<typeof IoReadingSchema>;

export const IoPressureTrackingSchema = z
  .object({
    observation: z
      .enum(['Over', 'Under', 'Unknown'])
      .describe('What the latest reading says: over a threshold, under all, or unknown (missing or stale).'),
    since: time().describe('Since when the readings have said so without interruption.'),
    exceeded: z.array(z.string()).max(8).optional().describe('The thresholds the latest reading reached.'),
  })
  .describe(
    'How long the readings have been over or under the thresholds: the basis of sustainSeconds and recoverySeconds.',
  );

export const RuntimeInfoSchema = z
  .object({
    version: z.string().describe('containerRuntimeVersion from the node status, e.g. containerd://1.6.0.'),
    predatesMountFix: z
      .boolean()
      .optional()
      .describe(
        'True for containerd before 1.5.10 (1.5 line) or before 1.6.0, which lack the read-only temp mount fix.',
      ),
    note: z.string().optional().describe('Advice about the runtime version.'),
  })
  .describe('The node container runtime and whether it predates the fixes for this incident.');
export type RuntimeInfoStatus = z.infer<typeof RuntimeInfoSchema>;

export const ACTION_KINDS = ['Cordon', 'Taint', 'Evict', 'Migrate', 'Uncordon', 'Untaint'] as const;
export type ActionKind = (typeof ACTION_KINDS)[number];

export const ActionRecordSchema = z
  .object({
    kind: z
      .enum(ACTION_KINDS)
      .describe(
        'Cordon, Taint, Evict (a stuck pod), Migrate (an IO-heavy running pod), Uncordon or Untaint.',
      ),
    target: z.string().describe('What was acted on, e.g. node/n1 or pod/ns/name.'),
    uid: z
      .string()
      .optional()
      .describe('The UID of the pod acted on (a replacement of the same name is another pod).'),
    time: time().describe('When the action was attempted.'),
    outcome: z
      .enum(['Succeeded', 'Failed', 'Blocked'])
      .describe(
        'Succeeded; Failed (the API refused it); Blocked (a guard or a PodDisruptionBudget held it).',
      ),
    dryRun: z.boolean().describe('Whether this was a dry run (nothing changed).'),
    reason: z
      .string()
      .describe('One CamelCase word: why the action was taken, or the guard that blocked it.'),
    message: z.string().max(1024).optional().describe('Detail.'),
  })
  .describe('One remediation action.');
export type ActionRecord = z.infer<typeof ActionRecordSchema>;

export const RemediationRecordSchema = z
  .object({
    policy: z.string().describe('The SandboxPolicy that acted.'),
    since: time().describe('When the remediation started.'),
    cordoned: z.boolean().describe('Whether the operator cordoned the node.'),
    taint: z.string().optional().describe('The taint the operator added, as key=value:effect.'),
    reason: z.string().max(1024).describe('Why the node was remediated.'),
    migrated: z
      .int()
      .min(0)
      .optional()
      .describe(
        'Pods moved off the node in this remediation (migrateWorkloads), counted against maxPodsPerNode.',
      ),
    dryRun: z
      .boolean()
      .describe('True: nothing was changed; this records what a dry run would have changed.'),
  })
  .describe(
    'What the operator changed on the node and has not undone. The Node annotations sandbox.remediator.io/* are the source of truth; this mirrors them (or, in a dry run, holds what would have been changed).',
  );
export type RemediationRecord = z.infer<typeof RemediationRecordSchema>;

export const BlockedActionSchema = z
  .object({
    kind: z.enum(ACTION_KINDS).describe('The action that was held back.'),
    target: z.string().describe('What it would have acted on.'),
    guard: z
      .string()
      .describe(
        'The guard that holds it: StormLimit, MinSchedulableNodes, EvictionRate, Cooldown, Paused, DryRun, NodeNotReady, ControlPlaneNode, NodeLease (another holder has the medik8s lease of the node), CacheNotSynced, NodeStillSchedulable, NoController, DaemonSetPod, MirrorPod, NoMigrateLabel, ProtectedNamespace, LocalStorage, NodeBoundVolume, SystemCritical, PodDataUnknown, OtherFence (an undo waits for another fence: a NodeMaintenance, a taint added after ours), DisruptionBudget or RefusedByApi.',
      ),
    message: z.string().max(1024).describe('Why, with the numbers.'),
    since: time().describe('Since when it has been blocked.'),
  })
  .describe('An action a guard holds back now.');
export type BlockedAction = z.infer<typeof BlockedActionSchema>;

export const SandboxHealthSpecSchema = z
  .object({
    nodeName: z.string().min(1).describe('The node this object describes (also its name).'),
    ioLimits: WantedIoLimitsSchema.optional(),
  })
  .describe('Identifies the node, and the IO limits the operator wants on its pods.');

export const SandboxHealthStatusSchema = z
  .object({
    policy: z.string().optional().describe('The SandboxPolicy that owns this node.'),
    state: NodeStateSchema.optional(),
    stuckPodCount: z.int().min(0).optional().describe('Number of stuck pods on the node.'),
    stuckPods: z
      .array(StuckPodSchema)
      .max(50)
      .optional()
      .describe('The stuck pods, longest-waiting first, at most 50.'),
    causes: z
      .array(
        z.object({
          cause: FailureCauseSchema,
          count: z.int().min(0).describe('Stuck pods with this cause.'),
        }),
      )
      .max(8)
      .optional()
      .meta({ [K8S_LIST_TYPE]: 'map', [K8S_LIST_MAP_KEYS]: ['cause'] })
      .describe('Stuck pods counted by cause.'),
    ioEvidence: z
      .enum(['IoSuspected', 'NotIo', 'Inconclusive'])
      .optional()
      .describe('Whether the failure messages point at IO (NameReserved, DeadlineExceeded) or elsewhere.'),
    ioReading: IoReadingSchema.optional(),
    ioLimits: IoLimitReportSchema.optional(),
    ioPressure: IoPressureTrackingSchema.optional(),
    ioCause: IoCauseSchema.optional(),
    topConsumer: z
      .string()
      .max(320)
      .optional()
      .describe('The top IO consumer and its share, for kubectl get, e.g. "shop/db-0 64%".'),
    runtime: RuntimeInfoSchema.optional(),
    lastAction: z
      .string()
      .optional()
      .describe('The latest action, for kubectl get, e.g. "Cordon Succeeded".'),
    actions: z
      .array(ActionRecordSchema)
      .max(MAX_RECORDED_ACTIONS)
      .optional()
      .describe('Recent actions, newest first, at most 20.'),
    remediation: RemediationRecordSchema.optional(),
    blocked: z
      .array(BlockedActionSchema)
      .max(MAX_RECORDED_ACTIONS)
      .optional()
      .describe('Actions held back by a guard right now, at most 20.'),
    conditions: ConditionsSchema.describe(
      'SandboxCreationDegraded, IoPressureHigh, Cordoned, RolloutsThrottled.',
    ),
    reportId: z
      .string()
      .max(64)
      .optional()
      .describe(
        "Names the operator's latest write of this status. A write sent before the one it follows is back names that one (a JSON Patch test of this field), so the API refuses it rather than let the two land out of order.",
      ),
  })
  .describe('What the operator knows about the node.');
export type SandboxHealthStatus = z.infer<typeof SandboxHealthStatusSchema>;
