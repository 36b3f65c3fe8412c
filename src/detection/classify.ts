import type { EventView } from './types.js';

export type FailureCause =
  'NameReserved' | 'DeadlineExceeded' | 'Network' | 'ImagePull' | 'RuntimeHandler' | 'Other';

/** The container runtime whose wording a message is in, when only one runtime words it that way. */
export type ContainerRuntime = 'containerd' | 'cri-o' | 'dockershim' | 'windows';

/**
 * The parts of a reserved sandbox name: containerd's `<pod>_<namespace>_<uid>_<attempt>`, cri-o's the same behind
 * `k8s_`; a container name has the container first.
 */
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
  /** The id of the request that holds the reservation, for NameReserved, when the message names it. */
  reservedFor?: string;
  /** The runtime, when the wording tells it. */
  runtime?: ContainerRuntime;
}

/** Causes that point at a runtime too slow to answer: on an otherwise healthy node, saturated disk IO. */
export const IO_CAUSES: ReadonlySet<FailureCause> = new Set(['NameReserved', 'DeadlineExceeded']);
export const NON_IO_CAUSES: ReadonlySet<FailureCause> = new Set(['Network', 'ImagePull', 'RuntimeHandler']);

/** Whether a cause points at IO; a pod with no failure seen yet (Unknown) does not. */
export function isIoCause(cause: FailureCause | 'Unknown'): boolean {
  return cause !== 'Unknown' && IO_CAUSES.has(cause);
}

// The rules read the normalised head (normaliseFailureMessage): no quotes, one space for any run of whitespace.
// Phrases contain spaces or '=' so that no pod, namespace or container name (which cannot) can fake them.
// Network is tested first: a CNI plugin that times out says "context deadline exceeded" too, and is not IO; and
// ImagePull before the IO causes: a pause image pull that times out says code = DeadlineExceeded.
const RULES: readonly (readonly [FailureCause, RegExp])[] = [
  [
    'Network',
    new RegExp(
      [
        'failed to (setup|set up) (pod )?network',
        'failed to (teardown|tear down|destroy|add|delete|remove) (pod )?network',
        'failed to (set up|clean up) sandbox container \\S+ network for pod', // dockershim
        'failed to create pod network sandbox', // cri-o
        'failed to get network status for (pod )?sandbox', // cri-o says "pod sandbox", containerd "sandbox"
        'error adding (pod )?(\\S+ )?to (CNI )?network', // kubelet's cni.go; cri-o's "to CNI network"
        'error adding network', // calico's own
        'failed to allocate for range',
        'no IP addresses available',
        'networkPlugin cni failed',
        'cni plugin not initialized',
        'network plugin is not ready',
        'network not ready',
        'plugin type=\\S* (name=\\S* )?failed', // cri-o's multus names the network between the two
        'failed to find plugin ',
        'failed to (create|delete|remove) (hcn )?endpoint', // Windows: HNS
        'key-value store of network plugin', // azure-vnet
      ].join('|'),
      'i',
    ),
  ],
  [
    'ImagePull',
    /failed to (pull|resolve|get sandbox|inspect sandbox) image|failed to pull and unpack image|failed pulling image|pull(ing)? image .* failed|initializing source docker:|pinging (docker|container) registry|ErrImagePull|ImagePullBackOff|failed to resolve reference|manifest unknown|pull access denied/i,
  ],
  [
    'RuntimeHandler',
    /no runtime for \S* is configured|RuntimeHandler \S* not supported|runtime handler|RuntimeClass|failed to get sandbox runtime|unknown runtime/i,
  ],
  [
    'NameReserved',
    /failed to reserve (sandbox|container) name|error reserving (pod|ctr) name|conflict, name \S+ already reserved for/i,
  ],
  ['DeadlineExceeded', /context deadline exceeded|code = DeadlineExceeded/i],
];

// Wordings only one runtime uses (dockershim's live on in cri-dockerd). Windows first: its containerd says hcs::.
const RUNTIMES: readonly (readonly [ContainerRuntime, RegExp])[] = [
  ['windows', /hcs::|hcsshim/i],
  [
    'cri-o',
    /error reserving (pod|ctr) name|timing out in CRI-O|already reserved for (pod|ctr) |failed to create pod network sandbox|network status for pod sandbox/i,
  ],
  [
    'dockershim',
    /failed pulling image|failed to inspect sandbox image|RuntimeHandler \S* not supported|networkPlugin cni failed|sandbox container \S+ network for pod|failed to (create a sandbox|start sandbox container) for pod|Error response from daemon/i,
  ],
  [
    'containerd',
    /failed to reserve (sandbox|container) name|failed to (get|pull) sandbox image|failed to pull and unpack image|failed to (setup|teardown|destroy) network for sandbox|failed to get network status for sandbox|failed to get sandbox runtime|no runtime for \S* is configured|failed to start sandbox container task|failed to create containerd task/i,
  ],
];

// The reserved name and its holder, each read on its own: a message cut short may carry one without the other.
const CONTAINERD_NAME = /failed to reserve (?:sandbox|container) name ([^\s:;]+)/i; // 2.x goes on "; check if ..."
const CONTAINERD_HOLDER = /is reserved for ([\w.-]+)/i;
// cri-o's "for id" is the id of the request that failed, not of the holder: only its old conflict wording names that.
const CRIO_NAME = /error reserving (?:pod|ctr) name (\S+) for id /i;
const CRIO_CONFLICT = /conflict, name (\S+) already reserved for (?:pod|ctr) ([\w.-]+)/i;
// A pod's uid is a UUID; a static pod's is the 32-hex hash of its manifest.
const UID = /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$/i;

/** Parses a containerd sandbox or container name; undefined when it is not one. */
export function parseReservedName(raw: string): ReservedName | undefined {
  return parseNameParts(raw, raw.split('_'));
}

/** Parses a cri-o sandbox or container name (`k8s_` first); undefined when it is not one. */
export function parseCrioReservedName(raw: string): ReservedName | undefined {
  const [prefix, ...parts] = raw.split('_');
  return prefix === 'k8s' ? parseNameParts(raw, parts) : undefined;
}

function parseNameParts(raw: string, parts: string[]): ReservedName | undefined {
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

const isQuote = (c: number) => c === 0x22 || c === 0x27; // " '
const isSpace = (c: number) =>
  c === 0x20 || (c >= 0x09 && c <= 0x0d) || c === 0xa0 || c === 0x2028 || c === 0x2029 || c === 0xfeff;

/**
 * The head of a message as the rules read it: quotes dropped with the backslashes that escape them (a log line's
 * \" and \\\", a copy's ' or none), and every run of whitespace one space. The same failure is quoted and wrapped
 * differently by kubelet, by log shippers and by people pasting it; none of that may change its cause. One pass that
 * stops once the head is full: linear in what it reads, and whitespace cannot push a phrase out of the head.
 */
export function normaliseFailureMessage(message: string): string {
  let head = '';
  let pendingSpace = false;
  for (let i = 0; i < message.length && head.length <= MAX_FAILURE_MESSAGE_CHARS; i++) {
    const c = message.charCodeAt(i);
    if (isSpace(c)) {
      pendingSpace = head.length > 0;
      continue;
    }
    if (isQuote(c)) continue;
    if (c === 0x5c) {
      const next = message.charCodeAt(i + 1);
      if (next === 0x5c || isQuote(next)) continue; // escapes a quote, maybe through more backslashes
    }
    if (pendingSpace) head += ' ';
    pendingSpace = false;
    head += String.fromCharCode(c);
  }
  return truncateFailureMessage(head);
}

/** Classifies a sandbox or container creation failure message (its head). Total: never throws. */
export function classifyFailureMessage(full: string): Classification {
  const message = normaliseFailureMessage(full);
  const rule = RULES.find(([, pattern]) => pattern.test(message));
  const result: Classification = { cause: rule ? rule[0] : 'Other' };
  const runtime = RUNTIMES.find(([, pattern]) => pattern.test(message));
  if (runtime) result.runtime = runtime[0];
  if (result.cause === 'NameReserved') Object.assign(result, readReservation(message));
  return result;
}

function readReservation(message: string): Pick<Classification, 'name' | 'reservedFor'> {
  const found: Pick<Classification, 'name' | 'reservedFor'> = {};
  const conflict = CRIO_CONFLICT.exec(message);
  const crio = conflict ?? CRIO_NAME.exec(message);
  if (crio?.[1]) {
    const name = parseCrioReservedName(crio[1]);
    if (name) found.name = name;
    if (conflict?.[2]) found.reservedFor = conflict[2];
    return found;
  }
  const raw = CONTAINERD_NAME.exec(message)?.[1];
  const name = raw === undefined ? undefined : parseReservedName(raw);
  if (name) found.name = name;
  const holder = CONTAINERD_HOLDER.exec(message)?.[1];
  if (holder) found.reservedFor = holder;
  return found;
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
    // kubelet folds repeats into one Event: "(combined from similar events): Error: ...".
    /^(\(combined from similar events\): )?Error: /.test(normaliseFailureMessage(event.message)) &&
    /reserve (sandbox|container) name|reserving (pod|ctr) name|context deadline exceeded|DeadlineExceeded|failed to create/i.test(
      normaliseFailureMessage(event.message),
    )
  );
}
