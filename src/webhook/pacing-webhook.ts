// The mutating admission webhook that paces pod starts: it adds our scheduling gate to a new pod while its
// policy says so, and answers "allowed" to everything, always. Decisions come from memory (the reconciler keeps
// them current), so an answer takes microseconds and never waits on the API.
import { createServer, type Server } from 'node:https';
import { isIP } from 'node:net';
import { PACING_GATE, PACING_STAMP } from '../api/v1alpha1/index.js';
import { isJson } from '../detection/raw-json.js';
import { listen } from '../observability/server.js';
import { placementOf, type Placement } from '../policy/node-affinity.js';
import type { PacingPolicy } from '../policy/pacing.js';
import type { ServingCert } from './certs.js';

export const WEBHOOK_PATH = '/mutate-pods';
/** The apiserver takes request bodies up to 3 MiB; a pod CREATE's AdmissionReview carries the pod once, and a wrapper. */
export const MAX_BODY = 4 * 1024 * 1024;
/** Connections served at once: with MAX_BODY, what a flood of clients can make the operator buffer (256 MiB). */
export const MAX_CONNECTIONS = 64;
/** The apiserver gives the webhook 2 s (timeoutSeconds): a client that takes longer is not the apiserver. */
export const REQUEST_TIMEOUT_MS = 10_000;

export interface WebhookDeps {
  /** Which policy, if any, gates a new pod in this namespace now, with this placement (pacingFor). */
  decide(namespace: string, placement: Placement): PacingPolicy | undefined;
  onDecision?(decision: { policy: string; namespace: string; gated: boolean; dryRun: boolean }): void;
  logger: { warn(message: string, fields?: Record<string, unknown>): void };
}

export interface AdmissionRequest {
  uid?: string;
  namespace?: string;
  operation?: string;
  kind?: { kind?: string };
  object?: {
    metadata?: { annotations?: Record<string, string>; name?: string; generateName?: string };
    spec?: { nodeName?: string; schedulingGates?: { name: string }[] };
  };
}

/**
 * The JSON patch that gates a pod, or undefined when it must not be gated (bound already). A pod that comes with our
 * gate has our annotations written over all the same: a gated-at its creator chose would let it jump the queue.
 */
export function gatePatch(request: AdmissionRequest, policy: string, now: Date): object[] | undefined {
  const pod = request.object;
  if (!pod || pod.spec?.nodeName) return undefined; // a pod bound past the scheduler cannot carry gates
  const gates = pod.spec?.schedulingGates;
  const escape = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');
  const patch: object[] = gates?.some((g) => g.name === PACING_GATE)
    ? []
    : gates
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

/** Why a body is not an AdmissionReview request we can answer, or the request. */
export function parseReview(text: string): { request: AdmissionRequest } | { problem: string } {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return { problem: 'the body is not JSON' };
  }
  if (!isJson(body) || body.kind !== 'AdmissionReview' || body.apiVersion !== 'admission.k8s.io/v1')
    return { problem: 'the body is not an admission.k8s.io/v1 AdmissionReview' };
  const request = body.request;
  if (!isJson(request) || typeof request.uid !== 'string' || request.uid === '')
    return { problem: 'the AdmissionReview has no request with a uid' };
  return { request: request };
}

/** A pod CREATE whose object has the shapes gatePatch reads (anything else is answered unchanged). */
function isPodCreate(request: AdmissionRequest): boolean {
  const { object } = request;
  if (request.operation !== 'CREATE' || request.kind?.kind !== 'Pod' || !isJson(object)) return false;
  const { metadata = {}, spec = {} } = object as Record<string, unknown>;
  if (!isJson(metadata) || !isJson(spec)) return false;
  const { annotations } = metadata;
  const gates = spec.schedulingGates;
  return (
    (annotations === undefined || isJson(annotations)) &&
    (gates === undefined ||
      (Array.isArray(gates) && gates.every((g) => isJson(g) && typeof g.name === 'string'))) &&
    (spec.nodeName === undefined || typeof spec.nodeName === 'string')
  );
}

/** The AdmissionReview answer: always allowed; with a patch when the pod is to be gated. */
export function review(request: AdmissionRequest, deps: WebhookDeps, now: Date): object {
  const response: Record<string, unknown> = { uid: request.uid ?? '', allowed: true };
  const namespace = typeof request.namespace === 'string' ? request.namespace : '';
  if (isPodCreate(request)) {
    const policy = deps.decide(
      namespace,
      placementOf(isJson(request.object?.spec) ? request.object.spec : {}) ?? {},
    );
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

/**
 * Serves the webhook over HTTPS. What is not an AdmissionReview is answered 400, a body over MAX_BODY 413 (and no
 * more of it read), a client that has not sent its request within REQUEST_TIMEOUT_MS is cut off: an error, never a
 * crash and never a hung socket. The apiserver sends 2-second requests and fails open on any error (failurePolicy: Ignore).
 */
export async function serveWebhook(
  bindAddress: string,
  cert: ServingCert,
  deps: WebhookDeps,
  requestTimeoutMs = REQUEST_TIMEOUT_MS,
): Promise<{ server: Server; port: number }> {
  const refusals = new RefusalLog(deps.logger);
  const server = createServer(
    {
      cert: cert.certPem,
      key: cert.keyPem,
      requestTimeout: requestTimeoutMs,
      headersTimeout: requestTimeoutMs,
      // How often those timeouts are checked (30 s by default, which would let a slow client hold on that long).
      connectionsCheckingInterval: Math.min(1_000, requestTimeoutMs),
      // A TLS handshake that does not finish: Node waits 120 s by default.
      handshakeTimeout: Math.min(5_000, requestTimeoutMs),
    },
    (req, res) => {
      const fail = (code: number, problem: string) => {
        if (!res.headersSent)
          res
            .writeHead(code, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' })
            .end(`${problem}\n`);
      };
      if (req.method !== 'POST' || req.url?.split('?')[0] !== WEBHOOK_PATH) {
        fail(404, 'not found');
        req.resume();
        return;
      }
      // Answered, then the connection closed (once the answer is out: before, the client would not see it).
      const tooLarge = () => {
        fail(413, `the body is over ${MAX_BODY} bytes`);
        res.once('finish', () => req.destroy());
      };
      const declared = Number(req.headers['content-length'] ?? 0);
      if (declared > MAX_BODY) {
        tooLarge();
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size <= MAX_BODY) chunks.push(chunk);
        else if (size - chunk.length <= MAX_BODY) {
          chunks.length = 0;
          tooLarge();
        }
      });
      req.on('error', () => undefined); // a client gone mid-body: nothing to answer
      req.on('end', () => {
        if (size > MAX_BODY) return;
        const parsed = parseReview(Buffer.concat(chunks).toString('utf8'));
        if ('problem' in parsed) {
          refusals.note(parsed.problem);
          fail(400, parsed.problem);
          return;
        }
        let answer: object;
        try {
          answer = review(parsed.request, deps, new Date());
        } catch (err) {
          // Fail open: a request we cannot decide on is allowed unchanged.
          deps.logger.warn('Failed to decide on an admission request; allowed it unchanged', {
            error: (err as Error).message,
          });
          answer = {
            apiVersion: 'admission.k8s.io/v1',
            kind: 'AdmissionReview',
            response: { uid: parsed.request.uid, allowed: true },
          };
        }
        res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(answer));
      });
    },
  );
  server.maxConnections = MAX_CONNECTIONS;
  server.on('clientError', (_err, socket) => {
    socket.destroy(); // a malformed request line or headers, or a TLS failure: not ours to answer
  });
  return { server, port: await listen(server, bindAddress) };
}

/** Bad requests in the log at most once a minute, with how many there were: anyone who can reach the port can send them. */
class RefusalLog {
  private count = 0;
  private last = 0;
  constructor(private readonly logger: WebhookDeps['logger']) {}
  note(problem: string): void {
    this.count++;
    if (Date.now() - this.last < 60_000) return;
    this.logger.warn('Refused requests that are not AdmissionReviews', { problem, requests: this.count });
    this.count = 0;
    this.last = Date.now();
  }
}

/**
 * The URL with a bare IPv6 address put in brackets, as a URL needs it: `https://$(POD_IP):9443/...` leaves an IPv6
 * pod IP bare (https://fd00::5:9443/mutate-pods becomes https://[fd00::5]:9443/mutate-pods). Anything else is kept.
 */
export function bracketIpv6(url: string): string {
  const match = /^(https?:\/\/)([0-9A-Fa-f:.]+)(:\d+)(\/.*)?$/.exec(url);
  if (!match) return url;
  const [, scheme, host = '', port, path = ''] = match;
  return isIP(host) === 6 ? `${scheme}[${host}]${port}${path}` : url;
}

/** The host of a URL as a certificate names it: an IPv6 address without its brackets. */
export function hostOfUrl(url: string): string {
  return new URL(url).hostname.replace(/^\[(.*)\]$/, '$1');
}

export function splitHostPort(address: string): [string, string] {
  const i = address.lastIndexOf(':');
  return i < 0 ? ['0.0.0.0', address] : [address.slice(0, i) || '0.0.0.0', address.slice(i + 1)];
}
