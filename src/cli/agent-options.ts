// The agent's command line, defined once: parsed with node:util and rendered as --help without commander, which
// alone adds about 4 MiB of RSS to the agent on every node (docs/adr/0011-lean-agent.md). main.ts hands
// `sandbox-remediator agent ...` here before it loads commander; commander's `help agent` prints formatAgentHelp().
import { parseArgs } from 'node:util';
import { LOG_LEVELS, type LogLevel } from '../observability/log.js';

export const AGENT_DESCRIPTION =
  "Run the node agent: read IO pressure from /proc and publish it into the node's SandboxHealth";

export interface AgentFlags {
  nodeName?: string;
  procRoot: string;
  intervalSeconds: number;
  heartbeatSeconds: number;
  pressuredHeartbeatSeconds: number;
  kubeconfig?: string;
  publish: boolean;
  cgroupRoot: string;
  attribution: boolean;
  culpritSharePercent: number;
  victimPsiPercent: number;
  runtimeCgroup?: string;
  includeLoopDevices: boolean;
  allowIoLimits: boolean;
  metricsBindAddress: string;
  logLevel: LogLevel;
}

/** One flag: `--<flag> <value>` sets `key`; a `switch` (`--no-publish`) sets it to false. */
type AgentOption = { flag: string; key: keyof AgentFlags; description: string } & (
  | { kind: 'string'; value: string; default?: string }
  | { kind: 'positiveInt'; value: string; default: number }
  | { kind: 'percent'; value: string; default: number }
  | { kind: 'choice'; value: string; choices: readonly string[]; default: string }
  | { kind: 'switch'; default: boolean }
);

export const AGENT_OPTIONS: readonly AgentOption[] = [
  {
    flag: 'node-name',
    key: 'nodeName',
    kind: 'string',
    value: 'name',
    description: 'the node this agent runs on (default: $NODE_NAME)',
  },
  {
    flag: 'proc-root',
    key: 'procRoot',
    kind: 'string',
    value: 'dir',
    description: "the host's /proc (mounted into the pod, e.g. /host/proc)",
    default: '/proc',
  },
  {
    flag: 'interval-seconds',
    key: 'intervalSeconds',
    kind: 'positiveInt',
    value: 'n',
    description: 'seconds between samples',
    default: 1,
  },
  {
    flag: 'heartbeat-seconds',
    key: 'heartbeatSeconds',
    kind: 'positiveInt',
    value: 'n',
    description: 'publish at least this often, even when nothing moved',
    default: 60,
  },
  {
    flag: 'pressured-heartbeat-seconds',
    key: 'pressuredHeartbeatSeconds',
    kind: 'positiveInt',
    value: 'n',
    description:
      'publish at least this often while any signal reads above idle, so a published value is never taken for current long after it changed',
    default: 10,
  },
  {
    flag: 'kubeconfig',
    key: 'kubeconfig',
    kind: 'string',
    value: 'path',
    description: 'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)',
  },
  {
    flag: 'no-publish',
    key: 'publish',
    kind: 'switch',
    description: 'only serve /metrics; write nothing to the API',
    default: true,
  },
  {
    flag: 'cgroup-root',
    key: 'cgroupRoot',
    kind: 'string',
    value: 'dir',
    description:
      "the host's cgroup tree (mounted into the pod, e.g. /host/sys/fs/cgroup), whose pod cgroups' IO counters tell who does the saturated disk's IO",
    default: '/sys/fs/cgroup',
  },
  {
    flag: 'culprit-share-percent',
    key: 'culpritSharePercent',
    kind: 'percent',
    value: 'n',
    description: "a pod with this share of the saturated disk's bytes or operations is a Culprit",
    default: 25,
  },
  {
    flag: 'victim-psi-percent',
    key: 'victimPsiPercent',
    kind: 'percent',
    value: 'n',
    description:
      'a pod whose own IO pressure (io.pressure some avg10, cgroup v2) is this or more, with a smaller share, is a Victim',
    default: 20,
  },
  {
    flag: 'runtime-cgroup',
    key: 'runtimeCgroup',
    kind: 'string',
    value: 'path',
    description:
      "the container runtime's cgroup, relative to the hierarchy's root (default: the first of system.slice/containerd.service, system.slice/crio.service, containerd, crio)",
  },
  {
    flag: 'no-attribution',
    key: 'attribution',
    kind: 'switch',
    description: 'do not read the cgroup tree: no per-pod attribution of the IO',
    default: true,
  },
  {
    flag: 'include-loop-devices',
    key: 'includeLoopDevices',
    kind: 'switch',
    description:
      "count loop devices as disks (disk busy, and whose IO the attribution splits): for a node whose runtime sits on a loop-mounted image, as make lab's does; without it a loop device's IO counts only on the disk under it",
    default: false,
  },
  {
    flag: 'allow-io-limits',
    key: 'allowIoLimits',
    kind: 'switch',
    description:
      "write the IO limits the operator wants on this node's pods (a SandboxPolicy's remediation.limitIo) into their cgroups under --cgroup-root, which must then be mounted writable; without it the agent sets none and says so in its report, and still lifts any it set before",
    default: false,
  },
  {
    flag: 'metrics-bind-address',
    key: 'metricsBindAddress',
    kind: 'string',
    value: 'addr',
    description: 'where /metrics, /healthz and /readyz are served; "0" disables',
    default: ':8082',
  },
  {
    flag: 'log-level',
    key: 'logLevel',
    kind: 'choice',
    value: 'level',
    choices: LOG_LEVELS,
    description: 'log verbosity',
    default: 'info',
  },
];

const AFTER_HELP = `Reads pressure/io (PSI), diskstats (busy %, await, in flight), stat (procs_blocked), PID/stat and PID/wchan
(D-state tasks, kworker CPU). While the node reads above idle, it also reads each pod's cgroup (v2 io.stat and
io.pressure, v1 blkio.throttle.io_service_bytes and io_serviced) and the runtime's, and 1/mountinfo, to say who
does the busiest disk's IO. A file that is missing or malformed makes its values unknown, never 0.
Example: sandbox-remediator agent --node-name kwok-node-1 --kubeconfig .cluster/kubeconfig --metrics-bind-address 127.0.0.1:9102`;

/** Refuses 0, negatives, fractions and words, with the message the operator's flags give. */
export function parsePositiveInt(value: string): number | Error {
  const n = Number(value);
  return Number.isInteger(n) && n >= 1 ? n : new Error('must be a positive integer');
}

/** A whole percent from 1 to 100: 0 would make every pod a culprit, and more than 100 none. */
export function parsePercent(value: string): number | Error {
  const n = parsePositiveInt(value);
  return n instanceof Error || n > 100 ? new Error('must be an integer from 1 to 100') : n;
}

export type AgentCommandLine =
  { kind: 'run'; flags: AgentFlags } | { kind: 'help' } | { kind: 'error'; message: string };

const term = (o: AgentOption) => `--${o.flag}${o.kind === 'switch' ? '' : ` <${o.value}>`}`;

/** The arguments after `agent`, read as commander read them: same defaults, same errors, last one wins. */
export function parseAgentArgs(args: readonly string[]): AgentCommandLine {
  const { tokens } = parseArgs({
    args: [...args],
    options: {
      help: { type: 'boolean', short: 'h' },
      ...Object.fromEntries(
        AGENT_OPTIONS.map((o) => [o.flag, { type: o.kind === 'switch' ? 'boolean' : 'string' } as const]),
      ),
    },
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const byFlag = new Map(AGENT_OPTIONS.map((o) => [o.flag, o]));
  const flags: Record<string, unknown> = Object.fromEntries(
    AGENT_OPTIONS.filter((o) => o.default !== undefined).map((o) => [o.key, o.default]),
  );
  let help = false;
  const unknown: string[] = [];
  const positionals: string[] = [];
  for (const token of tokens) {
    if (token.kind === 'positional') positionals.push(token.value);
    if (token.kind !== 'option') continue;
    if (token.name === 'help') {
      help = true;
      continue;
    }
    const option = token.rawName.startsWith('--') ? byFlag.get(token.name) : undefined;
    if (!option || (option.kind === 'switch' && token.inlineValue)) {
      unknown.push(args[token.index] ?? token.rawName);
      continue;
    }
    if (option.kind === 'switch') {
      flags[option.key] = !option.default;
      continue;
    }
    const invalid = (why: string) => ({
      kind: 'error' as const,
      message: `option '${term(option)}' argument '${token.value}' is invalid. ${why}`,
    });
    if (token.value === undefined)
      return { kind: 'error', message: `option '${term(option)}' argument missing` };
    if (option.kind === 'positiveInt' || option.kind === 'percent') {
      const n = (option.kind === 'percent' ? parsePercent : parsePositiveInt)(token.value);
      if (n instanceof Error) return invalid(n.message);
      flags[option.key] = n;
    } else if (option.kind === 'choice' && !option.choices.includes(token.value)) {
      return invalid(`Allowed choices are ${option.choices.join(', ')}.`);
    } else flags[option.key] = token.value;
  }
  if (help) return { kind: 'help' };
  if (unknown[0] !== undefined) return { kind: 'error', message: `unknown option '${unknown[0]}'` };
  if (positionals.length > 0)
    return {
      kind: 'error',
      message: `too many arguments for 'agent'. Expected 0 arguments but got ${positionals.length}.`,
    };
  return { kind: 'run', flags: flags as unknown as AgentFlags };
}

function describe(o: AgentOption): string {
  const shown = (v: string | number | boolean) => (typeof v === 'string' ? `"${v}"` : String(v));
  const extras = [
    ...(o.kind === 'choice' ? [`choices: ${o.choices.map(shown).join(', ')}`] : []),
    ...(o.default !== undefined && o.kind !== 'switch' ? [`default: ${shown(o.default)}`] : []),
  ];
  return extras.length > 0 ? `${o.description} (${extras.join(', ')})` : o.description;
}

/** Words of `text` in lines of at most `width` characters (a longer word gets a line of its own). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return [...lines, line];
}

/** `sandbox-remediator agent --help`, laid out as commander lays out the other subcommands' help. */
export function formatAgentHelp(columns = 80): string {
  const rows: [string, string][] = [
    ...AGENT_OPTIONS.map((o): [string, string] => [term(o), describe(o)]),
    ['-h, --help', 'display help for command'],
  ];
  const pad = Math.max(...rows.map(([t]) => t.length)) + 2;
  const options = rows.flatMap(([t, d]) =>
    wrap(d, Math.max(columns - pad - 2, 40)).map((line, i) => `  ${(i === 0 ? t : '').padEnd(pad)}${line}`),
  );
  return [
    'Usage: sandbox-remediator agent [options]',
    '',
    ...wrap(AGENT_DESCRIPTION, columns),
    '',
    'Options:',
    ...options,
    '',
    AFTER_HELP,
    '',
  ].join('\n');
}
