// The in-place remedy's transport (spec.remediation.limitIo), level-based like a Pod's spec and status: the operator
// writes the limits it wants for a node's pods in its SandboxHealth's spec.ioLimits (an admission policy lets no one
// else change them), the node's agent applies them to the cgroups of its own node's pods and reports, in
// status.ioLimits, what it wrote and what each file held before: what a lift puts back, and what a restarted agent
// reads back.
import { z } from 'zod';
import { K8S_INT_OR_STRING, K8S_LIST_MAP_KEYS, K8S_LIST_TYPE } from './meta.js';

/** Limits kept per node: a node has few culprits (each at least limitIo.minSharePercent of its device). */
export const MAX_IO_LIMITS_PER_NODE = 20;
/**
 * The cgroups one limit is written in at most: on cgroup v1 the pod's own and those below it (its containers'), since
 * blkio.throttle binds only the tasks of its own cgroup there.
 */
export const MAX_CGROUPS_PER_LIMIT = 8;
/**
 * The records a report holds at most: a report ahead names the limits in force and those about to be set, so twice the
 * most a node's wish can put in force.
 */
export const MAX_APPLIED_IO_LIMITS = MAX_IO_LIMITS_PER_NODE * MAX_CGROUPS_PER_LIMIT * 2;
/** A result's message at most. */
export const MAX_RESULT_MESSAGE = 1_024;
/** A round's results at most: the agent keeps the first so many. */
export const MAX_IO_LIMIT_RESULTS = MAX_IO_LIMITS_PER_NODE * 4;

const DeviceSchema = z
  .string()
  .regex(/^[0-9]{1,4}:[0-9]{1,7}$/, 'must be a block device as MAJ:MIN, e.g. 8:0')
  .describe('The block device, MAJ:MIN as /proc/diskstats and the cgroup files name it, e.g. 8:0.');

const RateSchema = (what: string) =>
  z
    .union([z.int().min(1).max(Number.MAX_SAFE_INTEGER), z.literal('max')])
    .meta({ [K8S_INT_OR_STRING]: true })
    .optional()
    .describe(`${what}, or "max" for none. Absent: not limited by this.`);

export const IoLimitRatesSchema = z
  .strictObject({
    rbps: RateSchema('Read bytes per second'),
    wbps: RateSchema('Written bytes per second'),
    riops: RateSchema('Read operations per second'),
    wiops: RateSchema('Write operations per second'),
  })
  .describe("A limit on one device, in io.max's keys (cgroup v1: the blkio.throttle.*_device files).");
export type IoLimitRates = z.infer<typeof IoLimitRatesSchema>;

export const WantedIoLimitSchema = z
  .strictObject({
    podUid: z
      .string()
      .min(1)
      .max(64)
      .describe('The limited pod, by UID: a pod made again under its name is not it.'),
    pod: z.string().max(320).describe('The pod as namespace/name, for people.'),
    device: DeviceSchema,
    limit: IoLimitRatesSchema,
    policy: z.string().max(253).describe('The SandboxPolicy whose limitIo wants the limit.'),
    since: z.iso
      .datetime()
      .describe('When the pod was first limited (RFC 3339): maxLimitSeconds count from it.'),
    changedAt: z.iso
      .datetime()
      .optional()
      .describe(
        'When the limit was last set or stepped (RFC 3339): the next step waits sustainSeconds from it.',
      ),
    floor: IoLimitRatesSchema.optional().describe(
      "The lowest the limit steps down to, set with the first limit (limitIo.floor): the operator's, for a restarted operator.",
    ),
    exhausted: z
      .boolean()
      .optional()
      .describe('At the floor with the node still saturated: handed to the next remedy the policy allows.'),
  })
  .describe("A limit the operator wants on one device of one of the node's pods.");
export type WantedIoLimitSpec = z.infer<typeof WantedIoLimitSchema>;

export const IO_LIMIT_RESULTS = [
  'Set',
  'Stepped',
  'Lifted',
  'LeftAsFound',
  'PodGone',
  'NoCgroup',
  'Refused',
  'Failed',
] as const;

export const AppliedIoLimitSchema = z
  .strictObject({
    podUid: z.string().min(1).max(64).describe('The limited pod.'),
    device: DeviceSchema,
    cgroupVersion: z
      .enum(['v1', 'v2'])
      .describe("The node's cgroup version: io.max (v2) or blkio.throttle (v1)."),
    cgroup: z
      .string()
      .max(1_024)
      .describe(
        "The cgroup written, relative to the IO hierarchy: the pod's; on cgroup v1 also each below it (its containers'), one entry each, since blkio.throttle binds only the tasks of its own cgroup there.",
      ),
    wanted: IoLimitRatesSchema.describe('What the operator wanted when the agent wrote it.'),
    written: IoLimitRatesSchema.describe(
      'What the agent wrote: the keys of wanted that were under what the files held (a lower limit someone set is kept).',
    ),
    before: IoLimitRatesSchema.describe(
      'What the files held before, key by key ("max", a value, or absent for no line): what a lift puts back, where the file still holds what was written.',
    ),
    replacing: IoLimitRatesSchema.optional().describe(
      'A step reported before it is written: what the limit it replaces wrote, in force until the step lands. A key holding either is ours.',
    ),
  })
  .describe("A limit the node's agent applied, and what the files held before it.");
export type AppliedIoLimitStatus = z.infer<typeof AppliedIoLimitSchema>;

export const IoLimitResultSchema = z
  .strictObject({
    podUid: z.string().min(1).max(64).describe('The pod.'),
    device: DeviceSchema.optional().describe(
      'The device of the limit it is about (absent from agents before it was reported): a pod may be limited on two.',
    ),
    result: z
      .enum(IO_LIMIT_RESULTS)
      .describe(
        'Set, Stepped, Lifted: done. LeftAsFound: lifted, but a file no longer held our limit, so it was left as someone set it. PodGone: the pod left the node, and its cgroup with it. NoCgroup: no cgroup of the pod on this node. Refused: the agent runs without --allow-io-limits. Failed: a write failed (message).',
      ),
    message: z.string().max(MAX_RESULT_MESSAGE).describe('What was done, with the figures.'),
  })
  .describe('What the agent did last about one limit.');

export const IoLimitReportSchema = z
  .strictObject({
    allowed: z
      .boolean()
      .describe('Whether the agent runs with --allow-io-limits: without it, it sets no limit.'),
    observedTime: z.iso
      .datetime()
      .describe('When the agent last brought the cgroups to spec.ioLimits (RFC 3339).'),
    applied: z
      .array(AppliedIoLimitSchema)
      .max(MAX_APPLIED_IO_LIMITS)
      .optional()
      .meta({ [K8S_LIST_TYPE]: 'map', [K8S_LIST_MAP_KEYS]: ['podUid', 'device', 'cgroup'] })
      .describe('The limits in force that the agent wrote.'),
    results: z
      .array(IoLimitResultSchema)
      .max(MAX_IO_LIMIT_RESULTS)
      .optional()
      .describe('What the last round did, one entry per limit set, stepped, lifted, refused or failed.'),
  })
  .describe("The node agent's report of the IO limits it applied (limitIo): written by the agent alone.");
export type IoLimitReport = z.infer<typeof IoLimitReportSchema>;

export const WantedIoLimitsSchema = z
  .array(WantedIoLimitSchema)
  .max(MAX_IO_LIMITS_PER_NODE)
  .meta({ [K8S_LIST_TYPE]: 'map', [K8S_LIST_MAP_KEYS]: ['podUid', 'device'] })
  .describe(
    "The IO limits the operator wants on the node's pods (spec.remediation.limitIo); only the operator's ServiceAccount may change them (admission policy). The node's agent applies them and reports in status.ioLimits.",
  );

/** What the SandboxHealth says of its node's IO limits, as the agent reads it from the answer to its writes. */
export interface IoLimitsAnswer {
  wanted: readonly WantedIoLimitSpec[];
  report?: IoLimitReport | undefined;
}
