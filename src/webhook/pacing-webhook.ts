// The mutating admission webhook that paces pod starts: it adds our scheduling gate to a new pod while its
// policy says so, and answers "allowed" to everything, always. Decisions come from memory (the reconciler keeps
// them current), so an answer takes microseconds and never waits on the API.
import { createServer, type Server } from 'node:https';
import { PACING_GATE, PACING_STAMP } from '../api/v1alpha1/index.js';
import { listen } from '../observability/server.js';
import type { PacingPolicy } from '../policy/pacing.js';
import type { ServingCert } from './certs.js';

export const WEBHOOK_PATH = '/mutate-pods';
const MAX_BODY = 3 * 1024 * 1024;

export interface WebhookDeps {
  /** Which policy, if any, gates a new pod in this namespace now. */
  decide(namespace: string): PacingPolicy | undefined;
  onDecision?(decision: { policy: string; namespace: string; gated: boolean; dryRun: boolean }): void;
  logger: { warn(message: string, fields?: Record<string, unknown>): void };
}

interface AdmissionRequest {
  uid?: string;
  namespace?: string;
  operation?: string;
  object?: {
    metadata?: { annotations?: Record<string, string>; name?: string; generateName?: string };
    spec?: { nodeName?: string; schedulingGates?: { name: string }[] };
  };
}

/** The JSON patch that gates a pod, or undefined when it must not be gated (bound already, or gated by us). */
export function gatePatch(request: AdmissionRequest, policy: string, now: Date): object[] | undefined {
  const pod = request.object;
  if (!pod || pod.spec?.nodeName) return undefined; // a pod bound past the scheduler cannot carry gates
  const gates = pod.spec?.schedulingGates;
  if (gates?.some((g) => g.name === PACING_GATE)) return undefined;
  const escape = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');
  const patch: object[] = gates
    ? [{ op: 'add', path: '/spec/schedulingGates/-', value: { name: PACING_GATE } }]
    : [{ op: 'add', path: '/spec/schedulingGates', value: [{ name: PACING_GATE }] }];
  const stamps = { [PACING_STAMP.policy]: policy, [PACING_STAMP.since]: now.toISOString() };
  if (pod.metadata?.annotations) {
    for (const [key, value] of Object.entries(stamps))
      patch.push({ op: 'add', path: `/metadata/annotations/${escape(key)}`, value });
  } else {
    patch.push({ op: 'add', path: '/metadata/annotations', value: stamps });
  }
  return patch;
}

/** The AdmissionReview answer: always allowed; with a patch when the pod is to be gated. */
export function review(body: unknown, deps: WebhookDeps, now: Date): object {
  const request = (body as { request?: AdmissionRequest }).request ?? {};
  const response: Record<string, unknown> = { uid: request.uid ?? '', allowed: true };
  const namespace = request.namespace ?? '';
  if (request.operation === 'CREATE') {
    const policy = deps.decide(namespace);
    if (policy) {
      // A dry run decides the same, and changes nothing.
      const patch = gatePatch(request, policy.name, now);
      deps.onDecision?.({
        policy: policy.name,
        namespace,
        gated: patch !== undefined,
        dryRun: !policy.gating,
      });
      if (patch && policy.gating) {
        response.patchType = 'JSONPatch';
        response.patch = Buffer.from(JSON.stringify(patch)).toString('base64');
      }
    }
  }
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response };
}

export async function serveWebhook(
  bindAddress: string,
  cert: ServingCert,
  deps: WebhookDeps,
): Promise<{ server: Server; port: number }> {
  const server = createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
    if (req.method !== 'POST' || req.url?.split('?')[0] !== WEBHOOK_PATH) {
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) req.destroy();
      else chunks.push(chunk);
    });
    req.on('end', () => {
      let answer: object;
      let uid = '';
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { request?: { uid?: unknown } };
        if (typeof body.request?.uid === 'string') uid = body.request.uid;
        answer = review(body, deps, new Date());
      } catch (err) {
        // Fail open: a request we cannot read is allowed unchanged.
        deps.logger.warn('Failed to read an admission request; allowed it unchanged', {
          error: (err as Error).message,
        });
        answer = {
          apiVersion: 'admission.k8s.io/v1',
          kind: 'AdmissionReview',
          response: { uid, allowed: true },
        };
      }
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  return { server, port: await listen(server, bindAddress) };
}

export function splitHostPort(address: string): [string, string] {
  const i = address.lastIndexOf(':');
  return i < 0 ? ['0.0.0.0', address] : [address.slice(0, i) || '0.0.0.0', address.slice(i + 1)];
}
