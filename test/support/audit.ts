// The local cluster's audit log (hack/cluster/audit-policy.yaml: every change, at Metadata level): who wrote
// what, and when, as the apiserver saw it. Tests read it to prove which process acted.
import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { dirname, join } from 'node:path';
import { CLUSTER_DIR } from './cluster.js';

export interface AuditEvent {
  auditID?: string;
  /** ResponseComplete, or RequestReceived for a logged request whose response never was (the apiserver died). */
  stage?: string;
  verb: string;
  /** The path and query, e.g. /api/v1/nodes/n1?fieldManager=sandbox-remediator. */
  requestURI?: string;
  user: { username: string; extra?: Record<string, string[]> };
  objectRef?: { resource?: string; subresource?: string; name?: string; namespace?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
  /** When the stage was logged: for ResponseComplete, when the response completed. */
  stageTimestamp?: string;
  /** The request body, for the writes the policy logs at Request level (the operator's Node and Deployment patches). */
  requestObject?: unknown;
}

export const AUDIT_LOG = join(CLUSTER_DIR, 'logs', 'audit.log');

/**
 * The audit events received at or after `since` (the apiserver flushes each line as it completes), from the log and
 * its rotated backup (200 MB each: a flood of Events on a reused cluster rotates it): one per request, its
 * ResponseComplete line, or its RequestReceived line alone when the apiserver died before it answered (the policy
 * logs that stage for the operator's Node and rollout patches only).
 */
export async function auditEvents(since: Date): Promise<AuditEvent[]> {
  const dir = dirname(AUDIT_LOG);
  const files = (await readdir(dir)).filter((f) => /^audit.*\.log$/.test(f)).sort();
  const lines: AuditEvent[] = [];
  for (const file of files) {
    const text = await readFile(join(dir, file), 'utf8');
    for (const line of text.split('\n')) {
      if (!line) continue;
      const event = JSON.parse(line) as AuditEvent;
      if (new Date(event.requestReceivedTimestamp) >= since) lines.push(event);
    }
  }
  return onePerRequest(lines);
}

/**
 * One event per request, in the order received: its ResponseComplete line, or its RequestReceived line when no
 * response was logged.
 */
export function onePerRequest(lines: readonly AuditEvent[]): AuditEvent[] {
  const answered = new Set(lines.filter((e) => e.stage !== 'RequestReceived').map((e) => e.auditID));
  return lines
    .filter((e) => e.stage !== 'RequestReceived' || !answered.has(e.auditID))
    .sort((a, b) => a.requestReceivedTimestamp.localeCompare(b.requestReceivedTimestamp));
}

/** The JWT ID of a ServiceAccount token, as the audit log names the credential ("JTI=<id>"). */
export function credentialIdOf(token: string): string {
  const payload = token.split('.')[1] ?? '';
  const { jti } = JSON.parse(Buffer.from(payload, 'base64url').toString()) as { jti?: string };
  if (!jti) throw new Error('the token has no jti claim');
  return `JTI=${jti}`;
}

export const credentialOf = (event: AuditEvent) =>
  event.user.extra?.['authentication.kubernetes.io/credential-id']?.[0];

/** "nodes", "pods/eviction", "sandboxhealths/status", ... */
export const resourceOf = (event: AuditEvent) =>
  [event.objectRef?.resource, event.objectRef?.subresource].filter(Boolean).join('/');

export const succeeded = (event: AuditEvent) => {
  const code = event.responseStatus?.code ?? 0;
  return code >= 200 && code < 300;
};

/**
 * The field manager a write named: tells the operator's patches ("sandbox-remediator") from the incident
 * injector's ("sandbox-remediator-incident") when both use the admin credentials, as in most tests.
 */
export const fieldManagerOf = (event: AuditEvent) =>
  new URL(event.requestURI ?? '/', 'https://apiserver').searchParams.get('fieldManager') ?? undefined;

/** The operator's ServiceAccount, as the audit log names the user. */
export const OPERATOR_USER = 'system:serviceaccount:sandbox-remediator-system:sandbox-remediator-operator';

/**
 * Whether the write took effect is unknown: the apiserver answered 5xx, as when etcd is killed under it (a write etcd
 * took and could not confirm is applied all the same), or was killed itself before it answered (no response logged).
 */
export const indeterminate = (event: AuditEvent) =>
  event.stage === 'RequestReceived' || (event.responseStatus?.code ?? 0) >= 500;

/**
 * The operator's successful writes since `since`, as the apiserver recorded them (leases left out); with
 * `indeterminate`, those answered 5xx too.
 */
export async function operatorWrites(
  since: Date,
  options: { indeterminate?: boolean } = {},
): Promise<AuditEvent[]> {
  await sleep(2000); // the last lines reach the audit log
  return (await auditEvents(since)).filter(
    (e) =>
      e.user.username === OPERATOR_USER &&
      (succeeded(e) || (options.indeterminate === true && indeterminate(e))) &&
      !['get', 'list', 'watch'].includes(e.verb) &&
      resourceOf(e) !== 'leases',
  );
}

/** How many times each object was written, for one resource ("nodes", "pods/eviction", "deployments"). */
export function writesPerObject(events: AuditEvent[], resource: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const e of events) {
    if (resourceOf(e) !== resource) continue;
    const name = e.objectRef?.name ?? '?';
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return counts;
}

/**
 * Per object, what each of the operator's patches set a spec field to, in order: true (a cordon, a pause), false
 * (an uncordon, a resume) or undefined (a patch that left it alone, such as a stamp). Request-level audit lines
 * carry the patch body.
 */
export function settings(
  events: AuditEvent[],
  resource: string,
  field: string,
): Record<string, (boolean | undefined)[]> {
  const out: Record<string, (boolean | undefined)[]> = {};
  for (const e of events) {
    if (resourceOf(e) !== resource || e.verb !== 'patch') continue;
    const spec = (e.requestObject as { spec?: Record<string, unknown> } | undefined)?.spec ?? {};
    const value = field in spec ? spec[field] === true : undefined;
    (out[e.objectRef?.name ?? '?'] ??= []).push(value);
  }
  return out;
}

/**
 * Each object's settings of a field, from writes that include indeterminate ones: one answered 5xx counts when the
 * next setting is the opposite (it took effect: the operator saw it), and is dropped when the same setting follows
 * (the operator retried it, and one of the two took effect). A write the apiserver never answered (killed under it)
 * has no body in the log (the apiserver logs the request before it reads it): it counts as the opposite of the
 * settings either side when they are the same (it took effect, and the operator saw it), and is dropped otherwise.
 * Writes that leave the field alone are left out.
 */
export function settledSettings(
  events: AuditEvent[],
  resource: string,
  field: string,
): Record<string, boolean[]> {
  const out: Record<string, { value: boolean | undefined; maybe: boolean }[]> = {};
  for (const e of events) {
    if (resourceOf(e) !== resource || e.verb !== 'patch') continue;
    const list = (out[e.objectRef?.name ?? '?'] ??= []);
    if (e.requestObject === undefined) {
      if (indeterminate(e)) list.push({ value: undefined, maybe: true });
      continue;
    }
    const spec = (e.requestObject as { spec?: Record<string, unknown> }).spec ?? {};
    if (field in spec) list.push({ value: spec[field] === true, maybe: indeterminate(e) });
  }
  return Object.fromEntries(Object.entries(out).map(([name, list]) => [name, settle(list)]));
}

function settle(list: { value: boolean | undefined; maybe: boolean }[]): boolean[] {
  const known: { value: boolean; maybe: boolean }[] = [];
  for (const [i, c] of list.entries()) {
    if (c.value !== undefined) {
      known.push({ value: c.value, maybe: c.maybe });
      continue;
    }
    const before = known.at(-1)?.value;
    const after = list.slice(i + 1).find((n) => n.value !== undefined)?.value;
    if (before !== undefined && before === after) known.push({ value: !before, maybe: true });
  }
  return known.filter((c, i) => !(c.maybe && known[i + 1]?.value === c.value)).map((c) => c.value);
}

/** True when the changes alternate, starting with a set: never two cordons (or pauses) without an undo between. */
export const alternates = (changes: (boolean | undefined)[]) =>
  changes.filter((c) => c !== undefined).every((c, i) => c === (i % 2 === 0));

/** The most evictions in any 60-second window (the span maxEvictionsPerMinute limits). */
export function maxEvictionsInAMinute(events: AuditEvent[]): number {
  const at = events
    .filter((e) => resourceOf(e) === 'pods/eviction')
    .map((e) => new Date(e.requestReceivedTimestamp).getTime())
    .sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; j < at.length; j++) {
    while (at[j]! - at[i]! >= 60_000) i++;
    most = Math.max(most, j - i + 1);
  }
  return most;
}
