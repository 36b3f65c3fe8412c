// Who does a saturated device's IO (the node agent's iotop, or another source's), and the cause the operator draws
// from it: part of SandboxHealth's status, in a file of its own.
import { z } from 'zod';

const time = () => z.iso.datetime();

/** What a consumer is to the saturated device: the cause, a sufferer, the runtime, the rest, or neither. */
export const IO_ROLES = ['Culprit', 'Victim', 'Runtime', 'System', 'Bystander'] as const;
export type IoRole = (typeof IO_ROLES)[number];

export const IoConsumerSchema = z
  .object({
    kind: z
      .enum(['Pod', 'Runtime', 'System'])
      .describe(
        "Pod: one pod's cgroup (its containers included). Runtime: the container runtime's own cgroup (image pulls, snapshot unpacking). System: the rest of the device's IO (system services, kworker writeback, what no cgroup was charged for).",
      ),
    podUid: z.string().optional().describe('The pod, for kind Pod (its cgroup is named after its UID).'),
    namespace: z
      .string()
      .optional()
      .describe(
        'The pod: as the source names it (Prometheus), or as the operator resolved its UID (absent when it could not).',
      ),
    name: z
      .string()
      .optional()
      .describe(
        'The pod: as the source names it (Prometheus), or as the operator resolved its UID (absent when it could not).',
      ),
    readBytesPerSecond: z
      .number()
      .min(0)
      .optional()
      .describe('Bytes read from the device per second over the interval.'),
    writeBytesPerSecond: z
      .number()
      .min(0)
      .optional()
      .describe('Bytes written to the device per second over the interval.'),
    opsPerSecond: z.number().min(0).optional().describe('Reads and writes per second over the interval.'),
    readOpsPerSecond: z
      .number()
      .min(0)
      .optional()
      .describe('Reads per second over the interval (what limitIo limits as riops).'),
    writeOpsPerSecond: z
      .number()
      .min(0)
      .optional()
      .describe('Writes per second over the interval (what limitIo limits as wiops).'),
    sharePercent: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe(
        "Its share of the device's IO: the larger of its share of the bytes and its share of the operations.",
      ),
    psiSomeAvg10Percent: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe("The pod cgroup's own io.pressure some avg10 (cgroup v2 only): how much it waits on IO."),
    role: z
      .enum(IO_ROLES)
      .describe(
        "Culprit: a large share of the device (the agent's --culprit-share-percent, 25 by default). Victim: a small share but high IO pressure of its own. Runtime, System: those consumers. Bystander: neither.",
      ),
  })
  .describe("One consumer of the saturated device's IO.");
export type IoConsumer = z.infer<typeof IoConsumerSchema>;

export const IoAttributionSchema = z
  .object({
    cgroupVersion: z.enum(['v1', 'v2']).optional().describe('The cgroup hierarchy the figures come from.'),
    driver: z
      .enum(['systemd', 'cgroupfs'])
      .optional()
      .describe("kubelet's cgroup driver, as the pod cgroups' names show it."),
    device: z
      .string()
      .optional()
      .describe('The saturated device (the busiest whole disk in /proc/diskstats).'),
    deviceNumber: z
      .string()
      .optional()
      .describe('Its MAJ:MIN: only IO to this device is counted, so none is counted twice.'),
    filesystem: z.string().optional().describe('The filesystem mounted from the device, when one is.'),
    confidence: z
      .enum(['High', 'Medium', 'Low'])
      .describe(
        'How much to trust the split. Low on cgroup v1, where buffered writeback is charged to the flusher, not to the pod that wrote; High on cgroup v2 with ext4, xfs or btrfs.',
      ),
    confidenceReason: z.string().max(256).describe('Why the confidence is what it is.'),
    totalBytesPerSecond: z
      .number()
      .min(0)
      .optional()
      .describe("The device's bytes per second, read and written."),
    totalOpsPerSecond: z.number().min(0).optional().describe("The device's reads and writes per second."),
    podsMeasured: z
      .int()
      .min(0)
      .describe('Pods whose IO counters were read: their cgroups, or their cAdvisor series.'),
    consumers: z
      .array(IoConsumerSchema)
      .max(8)
      .describe(
        'The top five pods by share, then the runtime and the rest: the shares add up to 100. A source with no IO bytes (the kubelet Summary) lists pods by their IO pressure, with no share: it can tell victims, not culprits.',
      ),
  })
  .describe(
    "Who does the device's IO: from the cgroups' IO counters (the node agent's iotop), cAdvisor's per-container counters (prometheus), or the pods' IO pressure alone (kubeletSummary). A missing figure is unknown, never zero.",
  );
export type IoAttribution = z.infer<typeof IoAttributionSchema>;

/** A pod by its UID, or by its name where the source names pods and gives no UIDs (Prometheus). */
export const consumerId = (c: IoConsumer): string => c.podUid ?? `${c.namespace ?? ''}/${c.name ?? ''}`;

export const IO_CAUSES = ['Pod', 'Runtime', 'Unattributed', 'Unknown'] as const;
export type IoCause = (typeof IO_CAUSES)[number];

export const IoCauseSchema = z
  .object({
    cause: z
      .enum(IO_CAUSES)
      .describe(
        "Named only on a node whose IO pressure is proven, and only when the attributed device is saturated in the same reading (its busy time at ioPressure.thresholds.diskBusyPercent). Pod: pods measured as culprits do the IO (with migrateWorkloads.by measuredIo they are moved once they have been culprits for sustainSeconds; a Victim never is). Runtime: the container runtime does, and no pod is moved for its IO (rollout throttling and pacing apply as the policy says). Unattributed: no consumer stands out, or the device is not saturated: no pod is moved for its IO. Unknown: no attribution to go by. The cordon, the stuck pods' evictions, migration by labels and rollout throttling do not depend on the cause.",
      ),
    message: z.string().max(1024).describe('The evidence, and the remedy it calls for.'),
    since: time().describe('Since when the cause has been what it is.'),
    consumers: z
      .array(IoConsumerSchema)
      .max(8)
      .optional()
      .describe(
        'The attribution it was chosen on, each pod named by namespace and name where it could be resolved.',
      ),
  })
  .describe("Who does the saturated device's IO, and the remedy that follows.");
export type IoCauseStatus = z.infer<typeof IoCauseSchema>;
