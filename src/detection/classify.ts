import type { EventView } from './types.js';

export type FailureCause =
  'NameReserved' | 'DeadlineExceeded' | 'Network' | 'ImagePull' | 'RuntimeHandler' | 'Other';

/** The parts of a containerd sandbox name `<pod>_<namespace>_<uid>_<attempt>` (a container name has the container first). */
export interface ReservedName {
  raw: string;
  pod: string;
  namespace: string;
  uid: string;
  attempt: number;
  container?: string;
}

export interface Classification {
  cause: FailureCause;
  /** The name whose reservation blocked the request, for NameReserved. */
  name?: ReservedName;
  /** The id of the request that holds the reservation, for NameReserved. */
  reservedFor?: string;
}

/** Causes that point at a runtime too slow to answer: on an otherwise healthy node, saturated disk IO. */
export const IO_CAUSES: ReadonlySet<FailureCause> = new Set(['NameReserved', 'DeadlineExceeded']);
export const NON_IO_CAUSES: ReadonlySet<FailureCause> = new Set(['Network', 'ImagePull', 'RuntimeHandler']);

export function isIoCause(cause: FailureCause): boolean {
  return IO_CAUSES.has(cause);
}

// Phrases contain spaces or '=' so that no pod, namespace or container name (which cannot) can fake them.
// Network is tested first: a CNI plugin that times out says "context deadline exceeded" too, and is not IO.
const RULES: readonly (readonly [FailureCause, RegExp])[] = [
  [
    'Network',
    new RegExp(
      [
        'failed to (setup|set up) (pod )?network',
        'failed to (teardown|tear down|destroy|add|delete|remove) (pod )?network',
        'failed to allocate for range',
        'no IP addresses available',
        'networkPlugin cni failed',
        'cni plugin not initialized',
        'network plugin is not ready',
        'network not ready',
        'plugin type="[^"]*" failed',
        'failed to find plugin "',
      ].join('|'),
      'i',
    ),
  ],
  [
    'ImagePull',
    /failed to (pull|resolve|get sandbox) image|pull(ing)? image .* failed|ErrImagePull|ImagePullBackOff|failed to resolve reference|manifest unknown|pull access denied/i,
  ],
  [
    'RuntimeHandler',
    /no runtime for "[^"]*" is configured|runtime handler|RuntimeClass|failed to get sandbox runtime|unknown runtime/i,
  ],
  ['NameReserved', /failed to reserve (sandbox|container) name/i],
  ['DeadlineExceeded', /context deadline exceeded|code = DeadlineExceeded/i],
];

// Tolerates containerd's own log form, where the quotes inside error="..." are escaped (\").
const RESERVED =
  /failed to reserve (?:sandbox|container) name \\*"([^"\\]+)\\*": name \\*"[^"\\]+\\*" is reserved for \\*"([^"\\]+)\\*"/i;
const UID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Parses a containerd sandbox or container name; undefined when it is not one. */
export function parseReservedName(raw: string): ReservedName | undefined {
  const parts = raw.split('_');
  if (parts.length !== 4 && parts.length !== 5) return undefined;
  const [attempt, uid, namespace, pod, container] = [...parts].reverse();
  if (!attempt || !/^\d+$/.test(attempt) || !uid || !UID.test(uid) || !namespace || !pod) return undefined;
  const name: ReservedName = { raw, pod, namespace, uid, attempt: Number(attempt) };
  if (container) name.container = container;
  return name;
}

/**
 * How much of a failure message is read: kubelet's messages are a few hundred characters, and the longest
 * NameReserved one (a 253-character pod name twice, a container name and a 64-character id) is about 1 KiB, so every
 * phrase above lies in the head. An Event's message has no length limit in the API, and the rules' `.*` makes their
 * cost quadratic in its length: 200 KB of "pull image " took 5.8 s, which a 1 MB Event would stretch into minutes of
 * a blocked event loop. The cache keeps no more than this either (src/kube/views.ts).
 */
export const MAX_FAILURE_MESSAGE_CHARS = 2048;

/** The head of a message that classification reads (never a lone half of a surrogate pair at the cut). */
export function truncateFailureMessage(message: string): string {
  if (message.length <= MAX_FAILURE_MESSAGE_CHARS) return message;
  const last = message.charCodeAt(MAX_FAILURE_MESSAGE_CHARS - 1);
  const highSurrogate = last >= 0xd800 && last <= 0xdbff;
  return message.slice(0, MAX_FAILURE_MESSAGE_CHARS - (highSurrogate ? 1 : 0));
}

/** Classifies a sandbox or container creation failure message (its head). Total: never throws. */
export function classifyFailureMessage(full: string): Classification {
  const message = truncateFailureMessage(full);
  const rule = RULES.find(([, pattern]) => pattern.test(message));
  const cause = rule ? rule[0] : 'Other';
  if (cause !== 'NameReserved') return { cause };
  const match = RESERVED.exec(message);
  const result: Classification = { cause };
  if (match?.[1] && match[2]) {
    const name = parseReservedName(match[1]);
    if (name) result.name = name;
    result.reservedFor = match[2];
  }
  return result;
}

/**
 * Whether an Event reports a failure to create a pod sandbox or container: kubelet's FailedCreatePodSandBox,
 * or a Failed event whose message is a creation error (kubelet prefixes those with "Error: ").
 */
export function isSandboxFailureEvent(
  event: Pick<EventView, 'reason' | 'message' | 'involvedKind'>,
): boolean {
  if (event.involvedKind !== 'Pod') return false;
  if (event.reason === 'FailedCreatePodSandBox') return true;
  return (
    event.reason === 'Failed' &&
    /^Error: /.test(event.message) &&
    /reserve (sandbox|container) name|context deadline exceeded|DeadlineExceeded|failed to create/i.test(
      truncateFailureMessage(event.message),
    )
  );
}
