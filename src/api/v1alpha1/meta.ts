import { z } from 'zod';
import { GROUP, VERSION } from './group.js';

export { GROUP, VERSION };
export const API_VERSION = `${GROUP}/${VERSION}`;

/** Prefix of every label and annotation key the operator reads or writes. */
export const KEY_PREFIX = `${GROUP}/`;

/** Marks the CRD generator's extension keys so that zod metadata carries them into the OpenAPI schema. */
export const K8S_INT_OR_STRING = 'x-kubernetes-int-or-string';
export const K8S_LIST_TYPE = 'x-kubernetes-list-type';
export const K8S_LIST_MAP_KEYS = 'x-kubernetes-list-map-keys';

/** Kubernetes label values, keys and qualified names (apimachinery validation). */
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** Returns why `key` is not a valid qualified name (label key, taint key), or undefined when it is. */
export function qualifiedNameProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) {
    return `prefix ${JSON.stringify(prefix)} must be a DNS subdomain of at most 253 characters`;
  }
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME_PART.test(name)) {
    return `name part ${JSON.stringify(name)} must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric`;
  }
  return undefined;
}

/** Returns why `value` is not a valid label value, or undefined when it is. */
export function labelValueProblem(value: string): string | undefined {
  if (value.length > 63 || !LABEL_VALUE.test(value)) {
    return `${JSON.stringify(value)} must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric`;
  }
  return undefined;
}

export const LabelSelectorRequirementSchema = z
  .strictObject({
    key: z.string().min(1).describe('The label key that the selector applies to.'),
    operator: z
      .enum(['In', 'NotIn', 'Exists', 'DoesNotExist'])
      .describe('How the key relates to the values: In, NotIn, Exists or DoesNotExist.'),
    values: z
      .array(z.string())
      .optional()
      .describe('Values for In and NotIn (at least one); must be empty for Exists and DoesNotExist.'),
  })
  .describe('A label selector requirement: a key, an operator and values.');

export const LabelSelectorSchema = z
  .strictObject({
    matchLabels: z
      .record(z.string(), z.string())
      .optional()
      .describe('Labels that must all be present with exactly these values.'),
    matchExpressions: z
      .array(LabelSelectorRequirementSchema)
      .optional()
      .describe('Requirements that must all hold (ANDed with matchLabels).'),
  })
  .describe(
    'A standard Kubernetes label selector. An empty selector matches everything; see each field for where that is refused.',
  );
export type LabelSelector = z.infer<typeof LabelSelectorSchema>;

export const ConditionStatusSchema = z.enum(['True', 'False', 'Unknown']);
export type ConditionStatus = z.infer<typeof ConditionStatusSchema>;

export const ConditionSchema = z
  .object({
    type: z.string().min(1).describe('Condition type in CamelCase, e.g. Valid or SandboxCreationDegraded.'),
    status: ConditionStatusSchema.describe('True, False or Unknown.'),
    reason: z.string().min(1).describe('One CamelCase word for the cause of the last transition.'),
    message: z.string().describe('Human-readable detail; may be empty.'),
    lastTransitionTime: z.iso.datetime().describe('When the status last changed (RFC 3339).'),
    observedGeneration: z
      .int()
      .min(0)
      .optional()
      .describe('The .metadata.generation the condition was computed from.'),
  })
  .describe('A standard Kubernetes condition.');
export type Condition = z.infer<typeof ConditionSchema>;

export const ConditionsSchema = z
  .array(ConditionSchema)
  .max(16)
  .optional()
  .meta({ [K8S_LIST_TYPE]: 'map', [K8S_LIST_MAP_KEYS]: ['type'] })
  .describe('Conditions, one per type.');

/** A non-negative integer or a whole percentage, as Kubernetes' IntOrString fields with a percent. */
export const IntOrPercentSchema = z
  .union([
    z.int().min(0),
    z.string().regex(/^(100|[1-9]?[0-9])%$/, 'must be an integer or a percentage 0%-100%'),
  ])
  .meta({ [K8S_INT_OR_STRING]: true });
export type IntOrPercent = z.infer<typeof IntOrPercentSchema>;

/**
 * Resolves an int-or-percent limit against a total. A percentage is rounded down (the cautious direction for a limit
 * on how much may be taken away), but a percentage above 0% of at least one allows one, as NodeHealthCheck's
 * minHealthy does for small clusters: 20% of 4 nodes is 1, not 0, else one degraded node of four is a storm and
 * nothing is ever fenced there. 0% allows none.
 */
export function resolveIntOrPercent(value: IntOrPercent, total: number): number {
  if (typeof value === 'number') return value;
  const percent = Number.parseInt(value, 10);
  const rounded = Math.floor((percent * total) / 100);
  return percent > 0 && total > 0 ? Math.max(1, rounded) : rounded;
}

/** Whether labels satisfy a label selector (ANDed matchLabels and matchExpressions). Empty matches all. */
export function matchesSelector(selector: LabelSelector, labels: Readonly<Record<string, string>>): boolean {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, key);
    const value = labels[key];
    const ok =
      operator === 'Exists'
        ? has
        : operator === 'DoesNotExist'
          ? !has
          : operator === 'In'
            ? has && values.includes(value ?? '')
            : !has || !values.includes(value ?? '');
    if (!ok) return false;
  }
  return true;
}

/** How many requirements a selector has: more requirements select more specifically. */
export function selectorSpecificity(selector: LabelSelector | undefined): number {
  if (!selector) return 0;
  return Object.keys(selector.matchLabels ?? {}).length + (selector.matchExpressions ?? []).length;
}

export const CONTROL_PLANE_LABEL = 'node-role.kubernetes.io/control-plane';
export const EXCLUDE_LABEL = `${KEY_PREFIX}exclude`;
/** A pod labelled so (true) is never migrated, however much IO it does. */
export const NO_MIGRATE_LABEL = `${KEY_PREFIX}no-migrate`;
/** A pod labelled so (true) never has its IO limited (limitIo). */
export const NO_LIMIT_LABEL = `${KEY_PREFIX}no-limit`;

/** A label selector in the apiserver's query syntax (labelSelector=...), the same set matchesSelector picks. */
export function formatSelector(selector: LabelSelector): string {
  const parts = Object.entries(selector.matchLabels ?? {}).map(([key, value]) => `${key}=${value}`);
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    if (operator === 'Exists') parts.push(key);
    else if (operator === 'DoesNotExist') parts.push(`!${key}`);
    else parts.push(`${key} ${operator === 'In' ? 'in' : 'notin'} (${values.join(',')})`);
  }
  return parts.join(',');
}
