// The local cluster's audit log (hack/cluster/audit-policy.yaml: every change, at Metadata level): who wrote
// what, and when, as the apiserver saw it. Tests read it to prove which process acted.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CLUSTER_DIR } from './cluster.js';

export interface AuditEvent {
  verb: string;
  /** The path and query, e.g. /api/v1/nodes/n1?fieldManager=sandbox-remediator. */
  requestURI?: string;
  user: { username: string; extra?: Record<string, string[]> };
  objectRef?: { resource?: string; subresource?: string; name?: string; namespace?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
  /** When the response completed (the policy logs that stage only). */
  stageTimestamp?: string;
  /** The request body, for the writes the policy logs at Request level (the operator's Node and Deployment patches). */
  requestObject?: unknown;
}

export const AUDIT_LOG = join(CLUSTER_DIR, 'logs', 'audit.log');

/** The audit events received at or after `since` (the apiserver flushes each line as it completes). */
export async function auditEvents(since: Date): Promise<AuditEvent[]> {
  const text = await readFile(AUDIT_LOG, 'utf8');
  const events: AuditEvent[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const event = JSON.parse(line) as AuditEvent;
    if (new Date(event.requestReceivedTimestamp) >= since) events.push(event);
  }
  return events;
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
