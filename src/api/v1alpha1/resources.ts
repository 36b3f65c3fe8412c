import { z } from 'zod';
import { GROUP, K8S_INT_OR_STRING, VERSION } from './meta.js';
import { SandboxHealthSpecSchema, SandboxHealthStatusSchema } from './sandbox-health.js';
import { SandboxPolicySpecSchema, SandboxPolicyStatusSchema } from './sandbox-policy.js';

/** An OpenAPI v3 schema node as a CustomResourceDefinition carries it. */
export type JsonSchema = { [key: string]: unknown };

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description: string;
  priority?: number;
}

/** Everything needed to generate one CRD and to address its objects through the API. */
export interface ResourceKind {
  kind: string;
  plural: string;
  singular: string;
  shortNames: string[];
  description: string;
  spec: z.ZodType;
  status: z.ZodType;
  /** Whether the whole spec may be omitted (its defaults then apply). */
  specDefaultsToEmpty: boolean;
  printerColumns: PrinterColumn[];
  /** CEL rules at the root of the schema, for what JSON Schema cannot say. */
  rootRules?: { rule: string; message: string }[];
}

const conditionStatus = (type: string) => `.status.conditions[?(@.type=="${type}")].status`;

export const SandboxPolicyKind: ResourceKind = {
  kind: 'SandboxPolicy',
  plural: 'sandboxpolicies',
  singular: 'sandboxpolicy',
  shortNames: ['sbp'],
  description:
    'SandboxPolicy selects nodes, says how pods stuck creating their sandbox and node IO pressure are recognised, and what the operator may do about them within which safety limits.',
  spec: SandboxPolicySpecSchema,
  status: SandboxPolicyStatusSchema,
  specDefaultsToEmpty: true,
  printerColumns: [
    {
      name: 'Valid',
      type: 'string',
      jsonPath: conditionStatus('Valid'),
      description: 'Whether the spec is valid.',
    },
    {
      name: 'Nodes',
      type: 'integer',
      jsonPath: '.status.matchedNodes',
      description: 'Nodes selected and owned.',
    },
    {
      name: 'Degraded',
      type: 'integer',
      jsonPath: '.status.degradedNodes',
      description: 'Nodes with stuck sandboxes.',
    },
    {
      name: 'Remediating',
      type: 'integer',
      jsonPath: '.status.remediatingNodes',
      description: 'Nodes being remediated.',
    },
    {
      name: 'Dry-Run',
      type: 'boolean',
      jsonPath: '.spec.safety.dryRun',
      description: 'Whether actions are dry runs.',
    },
    { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp', description: 'Age.' },
  ],
};

export const SandboxHealthKind: ResourceKind = {
  kind: 'SandboxHealth',
  plural: 'sandboxhealths',
  singular: 'sandboxhealth',
  shortNames: ['sbh'],
  description:
    'SandboxHealth is what the operator knows about one node (named after it): stuck sandboxes with their causes, the latest IO reading and node evidence, and the actions taken.',
  spec: SandboxHealthSpecSchema,
  status: SandboxHealthStatusSchema,
  specDefaultsToEmpty: false,
  printerColumns: [
    { name: 'State', type: 'string', jsonPath: '.status.state', description: 'Node state.' },
    { name: 'Stuck', type: 'integer', jsonPath: '.status.stuckPodCount', description: 'Stuck pods.' },
    {
      name: 'IO-PSI',
      type: 'number',
      jsonPath: '.status.ioReading.psiSomeAvg10Percent',
      description: 'IO pressure, some avg10 percent.',
    },
    {
      name: 'Disk-Busy',
      type: 'number',
      jsonPath: '.status.ioReading.diskBusyPercent',
      description: 'Busy percent of the busiest disk.',
    },
    {
      name: 'Top IO',
      type: 'string',
      jsonPath: '.status.topConsumer',
      description: 'The top IO consumer of the saturated device and its share.',
    },
    {
      name: 'IO-Limited',
      type: 'string',
      jsonPath: '.spec.ioLimits[*].pod',
      description: 'The pods whose IO the operator limits in place (limitIo), as namespace/name.',
    },
    { name: 'Action', type: 'string', jsonPath: '.status.lastAction', description: 'Latest action.' },
    { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp', description: 'Age.' },
    {
      name: 'Evidence',
      type: 'string',
      jsonPath: '.status.ioEvidence',
      description: 'IO evidence.',
      priority: 1,
    },
    {
      name: 'Policy',
      type: 'string',
      jsonPath: '.status.policy',
      description: 'Owning policy.',
      priority: 1,
    },
  ],
  rootRules: [
    { rule: 'self.metadata.name == self.spec.nodeName', message: 'metadata.name must equal spec.nodeName' },
  ],
};

export const RESOURCE_KINDS = [SandboxPolicyKind, SandboxHealthKind] as const;

const SAFE_INT_BOUND = Number.MAX_SAFE_INTEGER;

/**
 * Turns zod's JSON Schema (draft 2020-12) into a Kubernetes structural schema: drops what the apiserver
 * does not accept (propertyNames, $schema, zod's date-time regex, the safe-integer bounds) and rewrites
 * int-or-string unions into the one anyOf shape Kubernetes allows, with their checks lifted beside it.
 */
export function toStructuralSchema(node: unknown): JsonSchema {
  if (typeof node !== 'object' || node === null || Array.isArray(node)) {
    throw new Error(`expected a schema object, got ${JSON.stringify(node)}`);
  }
  const out: JsonSchema = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === '$schema' || key === 'propertyNames' || key === 'id') continue;
    // Unknown fields are pruned by the apiserver and refused by kubectl's strict field validation.
    if (key === 'additionalProperties' && value === false) continue;
    if ((key === 'maximum' && value === SAFE_INT_BOUND) || (key === 'minimum' && value === -SAFE_INT_BOUND))
      continue;
    if (key === 'properties') {
      out[key] = Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map(([name, child]) => [
          name,
          toStructuralSchema(child),
        ]),
      );
    } else if (key === 'items' || (key === 'additionalProperties' && typeof value === 'object')) {
      out[key] = toStructuralSchema(value);
    } else if (key === 'anyOf' && node[K8S_INT_OR_STRING as keyof typeof node] === true) {
      out.anyOf = [{ type: 'integer' }, { type: 'string' }];
      for (const branch of value as JsonSchema[]) {
        const lifted = toStructuralSchema(branch);
        delete lifted.type;
        Object.assign(out, lifted);
      }
    } else if (key === 'anyOf' || key === 'oneOf' || key === 'allOf') {
      throw new Error(`${key} other than int-or-string is not structural; model it differently`);
    } else {
      out[key] = value;
    }
  }
  if (out.format === 'date-time') delete out.pattern;
  // kubectl explain prints descriptions but not defaults; say the default in words.
  const scalarDefault =
    out.default !== undefined && (typeof out.default !== 'object' || out.default === null);
  if (scalarDefault && typeof out.description === 'string')
    out.description += ` Default: ${JSON.stringify(out.default)}.`;
  return out;
}

/** The CustomResourceDefinition for a kind, ready to serialise. */
export function buildCustomResourceDefinition(kind: ResourceKind): JsonSchema {
  const json = (schema: z.ZodType) =>
    toStructuralSchema(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'throw', reused: 'inline' }));
  const spec = json(kind.spec);
  if (kind.specDefaultsToEmpty) spec.default = {};
  const root: JsonSchema = {
    type: 'object',
    description: kind.description,
    properties: {
      apiVersion: {
        type: 'string',
        description: 'APIVersion of this object: sandbox.remediator.io/v1alpha1.',
      },
      kind: { type: 'string', description: `Kind of this object: ${kind.kind}.` },
      metadata: { type: 'object' },
      spec,
      status: json(kind.status),
    },
    required: kind.specDefaultsToEmpty ? [] : ['spec'],
  };
  if (kind.rootRules) root['x-kubernetes-validations'] = kind.rootRules;
  if ((root.required as string[]).length === 0) delete root.required;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: `${kind.plural}.${GROUP}`,
      labels: { 'app.kubernetes.io/name': 'sandbox-remediator' },
    },
    spec: {
      group: GROUP,
      scope: 'Cluster',
      names: {
        kind: kind.kind,
        listKind: `${kind.kind}List`,
        plural: kind.plural,
        singular: kind.singular,
        shortNames: kind.shortNames,
        categories: ['sandbox-remediator'],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: kind.printerColumns,
          schema: { openAPIV3Schema: root },
        },
      ],
    },
  };
}
