import { z } from 'zod';
import { LabelSelectorSchema } from './meta.js';

/** Upper bound of safety.maxEvictionsPerMinute, and so of the eviction log kept in status. */
export const MAX_EVICTIONS_PER_MINUTE = 600;

const seconds = (min: number, max: number) => z.int().min(min).max(max);

export const PacePodStartsSchema = z
  .strictObject({
    maxPodStartsPerMinute: z
      .int()
      .min(1)
      .max(MAX_EVICTIONS_PER_MINUTE)
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
