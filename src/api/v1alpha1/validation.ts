import type { z } from 'zod';
import { KEY_PREFIX, labelValueProblem, qualifiedNameProblem, type LabelSelector } from './meta.js';
import { KNOWN_IO_CONDITIONS, NOT_IO_CONDITIONS } from './node-condition.js';
import { SandboxPolicySpecSchema, type PolicyProblem, type SandboxPolicySpec } from './sandbox-policy.js';

export type PolicyValidation =
  { valid: true; spec: SandboxPolicySpec; problems: [] } | { valid: false; problems: PolicyProblem[] };

/** Joins a zod issue path onto a field path: ['a', 0, 'b'] -> spec.a[0].b */
function fieldPath(base: string, path: readonly PropertyKey[]): string {
  return path.reduce<string>(
    (acc, part) => (typeof part === 'number' ? `${acc}[${part}]` : `${acc}.${String(part)}`),
    base,
  );
}

function issueProblems(error: z.ZodError, base: string): PolicyProblem[] {
  return error.issues.flatMap((issue) =>
    issue.code === 'unrecognized_keys'
      ? issue.keys.map((key) => ({ field: fieldPath(base, [...issue.path, key]), message: 'unknown field' }))
      : [{ field: fieldPath(base, issue.path), message: issue.message }],
  );
}

/** Every problem with a label selector that the apiserver's own selector parsing would refuse. */
export function selectorProblems(selector: LabelSelector, field: string): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    const keyProblem = qualifiedNameProblem(key);
    if (keyProblem)
      problems.push({ field: `${field}.matchLabels`, message: `key ${JSON.stringify(key)}: ${keyProblem}` });
    const valueProblem = labelValueProblem(value);
    if (valueProblem)
      problems.push({ field: `${field}.matchLabels.${key}`, message: `value ${valueProblem}` });
  }
  (selector.matchExpressions ?? []).forEach((requirement, i) => {
    const at = `${field}.matchExpressions[${i}]`;
    const keyProblem = qualifiedNameProblem(requirement.key);
    if (keyProblem) problems.push({ field: `${at}.key`, message: keyProblem });
    const values = requirement.values ?? [];
    const needsValues = requirement.operator === 'In' || requirement.operator === 'NotIn';
    if (needsValues && values.length === 0) {
      problems.push({
        field: `${at}.values`,
        message: `must be non-empty for operator ${requirement.operator}`,
      });
    }
    if (!needsValues && values.length > 0) {
      problems.push({ field: `${at}.values`, message: `must be empty for operator ${requirement.operator}` });
    }
    values.forEach((value, j) => {
      const valueProblem = labelValueProblem(value);
      if (valueProblem) problems.push({ field: `${at}.values[${j}]`, message: valueProblem });
    });
  });
  return problems;
}

function isEmptySelector(selector: LabelSelector): boolean {
  return (
    Object.keys(selector.matchLabels ?? {}).length === 0 && (selector.matchExpressions ?? []).length === 0
  );
}

function urlProblem(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `${JSON.stringify(raw)} is not a URL`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return `scheme must be http or https, not ${url.protocol}`;
  return undefined;
}

function regexProblem(raw: string): string | undefined {
  try {
    const groups = new RegExp(`${raw}|`).exec('')?.length ?? 1;
    return groups < 2 ? 'must contain a capture group for the node name' : undefined;
  } catch (err) {
    return `not a valid regular expression: ${(err as Error).message}`;
  }
}

/**
 * A cross-field problem, and every field besides its own (and what lies within it) that its rule read: when
 * the schema refused one of those, the rule judged a default in its place and the problem is not the user's.
 */
interface Finding extends PolicyProblem {
  alsoRead?: string[];
}

function crossFieldFindings(spec: SandboxPolicySpec): Finding[] {
  const problems: Finding[] = [];
  if (spec.nodeSelector) problems.push(...selectorProblems(spec.nodeSelector, 'spec.nodeSelector'));

  const io = spec.ioPressure;
  if (io.source === 'prometheus' && !io.prometheus) {
    problems.push({
      field: 'spec.ioPressure.prometheus',
      message: 'is required when source is prometheus',
      alsoRead: ['spec.ioPressure.source'],
    });
  }
  if (io.prometheus) problems.push(...prometheusFindings(io.prometheus));

  if (
    io.source === 'nodeCondition' &&
    (NOT_IO_CONDITIONS as readonly string[]).includes(io.nodeCondition.type)
  ) {
    problems.push({
      field: 'spec.ioPressure.nodeCondition.type',
      message: `${io.nodeCondition.type} does not report IO pressure; name a condition that does (${KNOWN_IO_CONDITIONS.join(', ')})`,
      alsoRead: ['spec.ioPressure.source'],
    });
  }
  if (io.staleAfterSeconds < io.sustainSeconds / 2 && io.sustainSeconds > 0) {
    // A reading must live long enough to be seen again while the sustain window fills.
    problems.push({
      field: 'spec.ioPressure.staleAfterSeconds',
      message: `must be at least half of sustainSeconds (${io.sustainSeconds}), or readings expire before pressure can be sustained`,
      alsoRead: ['spec.ioPressure.sustainSeconds'],
    });
  }

  const remediation = spec.remediation;
  if (remediation.taint) {
    const bad = qualifiedNameProblem(remediation.taint.key);
    if (bad) problems.push({ field: 'spec.remediation.taint.key', message: bad });
    else if (!remediation.taint.key.startsWith(KEY_PREFIX))
      problems.push({
        field: 'spec.remediation.taint.key',
        message: `must be under ${KEY_PREFIX} (for example ${KEY_PREFIX}io-pressure): the operator's admission policy lets it add or remove no other taint`,
      });
    const badValue = labelValueProblem(remediation.taint.value);
    if (badValue) problems.push({ field: 'spec.remediation.taint.value', message: badValue });
  }
  const migrate = remediation.migrateWorkloads;
  if (migrate && migrate.by === 'labels' && !migrate.podSelector)
    problems.push({
      field: 'spec.remediation.migrateWorkloads.podSelector',
      message:
        'is required when by is labels (or set by: measuredIo to move the pods measured as doing the IO)',
      alsoRead: ['spec.remediation.migrateWorkloads.by'],
    });
  if (migrate?.podSelector) {
    const selector = migrate.podSelector;
    if (isEmptySelector(selector)) {
      problems.push({
        field: 'spec.remediation.migrateWorkloads.podSelector',
        message:
          migrate.by === 'labels'
            ? 'must not be empty: an empty selector would evict every pod on the node'
            : 'must not be empty: leave it out to let any pod measured as a culprit move',
      });
    }
    problems.push(...selectorProblems(selector, 'spec.remediation.migrateWorkloads.podSelector'));
  }
  const limitIo = remediation.limitIo;
  if (limitIo && limitIo.floor.percent > limitIo.startPercent)
    problems.push({
      field: 'spec.remediation.limitIo.floor.percent',
      message: `must be at most startPercent (${limitIo.startPercent}): the first limit would start under the floor`,
      alsoRead: ['spec.remediation.limitIo.startPercent'],
    });
  const paced = remediation.throttleRollouts?.pacePodStarts?.namespaceSelector;
  if (paced) {
    if (isEmptySelector(paced))
      problems.push({
        field: 'spec.remediation.throttleRollouts.pacePodStarts.namespaceSelector',
        message: 'must not be empty: pacing every namespace must be asked for by name or label',
      });
    problems.push(
      ...selectorProblems(paced, 'spec.remediation.throttleRollouts.pacePodStarts.namespaceSelector'),
    );
  }
  const namespaces = remediation.throttleRollouts?.namespaceSelector;
  if (namespaces)
    problems.push(...selectorProblems(namespaces, 'spec.remediation.throttleRollouts.namespaceSelector'));
  return problems;
}

/**
 * What the schema cannot say: relations between fields and the syntax of embedded mini-languages.
 * Pure; returns every problem, with its field path.
 */
export function crossFieldProblems(spec: SandboxPolicySpec): PolicyProblem[] {
  return crossFieldFindings(spec).map(({ field, message }) => ({ field, message }));
}

type Path = readonly PropertyKey[];

/**
 * The paths to drop so that the schema's issues go away. Cut at the first array index: dropping one element
 * would renumber its siblings, and the problems found afterwards would name the wrong ones.
 */
function droppedPaths(error: z.ZodError): Path[] {
  return error.issues
    .flatMap((issue) =>
      issue.code === 'unrecognized_keys' ? issue.keys.map((key) => [...issue.path, key]) : [issue.path],
    )
    .map((path) => {
      const index = path.findIndex((part) => typeof part === 'number');
      return index < 0 ? path : path.slice(0, index);
    });
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A copy of value without the fields at paths; value itself is never changed. One pass for all of them:
 * dropping them one by one would copy an object once per unknown key or bad label in it.
 */
function without(value: unknown, paths: readonly Path[]): unknown {
  if (!isRecord(value)) return value;
  const below = new Map<string, Path[]>();
  for (const [head, ...rest] of paths) {
    if (head === undefined) continue;
    const key = String(head);
    const list = below.get(key);
    if (list) list.push(rest);
    else below.set(key, [rest]);
  }
  return Object.fromEntries(
    Object.entries(value).flatMap(([key, field]): [string, unknown][] => {
      const paths = below.get(key);
      if (!paths) return [[key, field]];
      return paths.some((path) => path.length === 0) ? [] : [[key, without(field, paths)]];
    }),
  );
}

const samePath = (a: Path, b: Path) => a.length === b.length && a.every((part, i) => part === b[i]);

/**
 * Drops the failing fields until the rest parses, so the cross-field rules can run on everything else. A
 * required field fails again once dropped; then its parent goes instead, so each round either succeeds or
 * walks a path up, and the deepest path bounds the rounds. Undefined when only the whole spec would do.
 */
function parseWithout(
  raw: unknown,
  error: z.ZodError,
): { spec: SandboxPolicySpec; dropped: Path[] } | undefined {
  let dropped = droppedPaths(error);
  const rounds = dropped.reduce((deepest, path) => Math.max(deepest, path.length), 0);
  for (let round = 0; round < rounds; round++) {
    if (dropped.some((path) => path.length === 0)) return undefined;
    const parsed = SandboxPolicySpecSchema.safeParse(without(raw, dropped));
    if (parsed.success) return { spec: parsed.data, dropped };
    const again = droppedPaths(parsed.error);
    const failedAgain = (path: Path) => again.some((other) => samePath(other, path));
    dropped = [
      ...dropped.filter((path) => !failedAgain(path)),
      ...again.map((path) => (dropped.some((d) => samePath(d, path)) ? path.slice(0, -1) : path)),
    ];
  }
  return undefined;
}

/** The field and every field that encloses it: spec.a.b[0] -> spec, spec.a, spec.a.b, spec.a.b[0]. */
function enclosing(field: string): string[] {
  const fields: string[] = [];
  for (let i = 0; i < field.length; i++)
    if (field[i] === '.' || field[i] === '[') fields.push(field.slice(0, i));
  fields.push(field);
  return fields;
}

/**
 * Validates a SandboxPolicy spec as a user wrote it (defaults not yet applied). The schema is checked
 * first; the cross-field rules then run on the spec without the fields the schema refused, so a bad field
 * does not hide the problems of any other, not even of its siblings.
 */
export function validateSandboxPolicySpec(raw: unknown): PolicyValidation {
  const parsed = SandboxPolicySpecSchema.safeParse(raw ?? {});
  if (parsed.success) {
    const problems = crossFieldProblems(parsed.data);
    return problems.length === 0
      ? { valid: true, spec: parsed.data, problems: [] }
      : { valid: false, problems };
  }
  const problems = issueProblems(parsed.error, 'spec');
  const patched = parseWithout(raw, parsed.error);
  if (!patched) return { valid: false, problems };
  // A rule that looked at a dropped field (at, within or around its own field, or through alsoRead) judged a
  // default or an absence, not what the user wrote: it would repeat the schema's problem or make one up,
  // such as an empty selector whose only bad label was dropped.
  const dropped = new Set(patched.dropped.map((path) => fieldPath('spec', path)));
  const aroundDropped = new Set([...dropped].flatMap(enclosing));
  const touchesDropped = (field: string) =>
    aroundDropped.has(field) || enclosing(field).some((outer) => dropped.has(outer));
  for (const { field, message, alsoRead = [] } of crossFieldFindings(patched.spec)) {
    if (![field, ...alsoRead].some(touchesDropped)) problems.push({ field, message });
  }
  return { valid: false, problems };
}

/** What the Prometheus source's settings cannot be, that the schema cannot say. */
function prometheusFindings(
  prometheus: NonNullable<SandboxPolicySpec['ioPressure']['prometheus']>,
): Finding[] {
  const problems: Finding[] = [];
  const bad = urlProblem(prometheus.url);
  if (bad) problems.push({ field: 'spec.ioPressure.prometheus.url', message: bad });
  const badRegex = regexProblem(prometheus.nodeLabelRegex);
  if (badRegex) problems.push({ field: 'spec.ioPressure.prometheus.nodeLabelRegex', message: badRegex });
  for (const name of ['ca', 'bearerToken'] as const) {
    const credential = prometheus[name];
    if (credential && (credential.file === undefined) === (credential.secret === undefined))
      problems.push({
        field: `spec.ioPressure.prometheus.${name}`,
        message: 'must name exactly one of file and secret',
      });
  }
  if (prometheus.bearerToken && !prometheus.url.startsWith('https:'))
    problems.push({
      field: 'spec.ioPressure.prometheus.bearerToken',
      message: 'would be sent in clear text: the url is not https',
      alsoRead: ['spec.ioPressure.prometheus.url'],
    });
  if (prometheus.ca && !prometheus.url.startsWith('https:'))
    problems.push({
      field: 'spec.ioPressure.prometheus.ca',
      message: 'is for an https url; the url is not one',
      alsoRead: ['spec.ioPressure.prometheus.url'],
    });
  return problems;
}
