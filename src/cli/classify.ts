import { readFile } from 'node:fs/promises';
import { readStdin } from './process.js';
import {
  classifyFailureMessage,
  truncateFailureMessage,
  isIoCause,
  type ContainerRuntime,
  type FailureCause,
} from '../detection/index.js';

/** One message to classify, and where it came from: `file:line`, or `namespace/name reason` for an Event. */
export interface ClassifyInput {
  source: string;
  message: string;
}

/** What the operator makes of a message: the shape of `classify -o json`. */
export interface ClassifyResult {
  source: string;
  cause: FailureCause;
  io: boolean;
  runtime?: ContainerRuntime;
  /** The reserved sandbox or container name, for NameReserved. */
  reservedName?: string;
  /** The id holding the reservation, when the message names it. */
  reservedFor?: string;
  message: string;
}

/** How much of a message the text output shows. */
const SHOWN_MESSAGE_CHARS = 160;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const stringOf = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);

/**
 * The messages in a text: each item's message when it is a List of Events (`kubectl get events -o json`, core/v1 or
 * events.k8s.io/v1), else every non-blank line.
 */
export function readClassifyInputs(text: string, source: string): ClassifyInput[] {
  return readEventList(text) ?? readLines(text, source);
}

function readLines(text: string, source: string): ClassifyInput[] {
  return text
    .split(/\r?\n/)
    .flatMap((line, i) => (line.trim() === '' ? [] : [{ source: `${source}:${i + 1}`, message: line }]));
}

function readEventList(text: string): ClassifyInput[] | undefined {
  if (!text.trimStart().startsWith('{')) return undefined;
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    return undefined; // JSON lines, say: a message per line
  }
  if (!isRecord(list) || !Array.isArray(list.items)) return undefined;
  return list.items.flatMap((item: unknown) => {
    if (!isRecord(item)) return [];
    const message = stringOf(item.message) ?? stringOf(item.note);
    if (message === undefined) return [];
    const about = isRecord(item.involvedObject)
      ? item.involvedObject
      : isRecord(item.regarding)
        ? item.regarding
        : {};
    const metadata = isRecord(item.metadata) ? item.metadata : {};
    const namespace = stringOf(about.namespace) ?? stringOf(metadata.namespace);
    const name = stringOf(about.name) ?? '?';
    const reason = stringOf(item.reason);
    return [
      { source: [namespace ? `${namespace}/${name}` : name, reason].filter(Boolean).join(' '), message },
    ];
  });
}

export function classifyInputs(inputs: readonly ClassifyInput[]): ClassifyResult[] {
  return inputs.map(({ source, message }) => {
    // The head the operator keeps (src/kube/views.ts), so that the verdict is the operator's.
    const { cause, runtime, name, reservedFor } = classifyFailureMessage(truncateFailureMessage(message));
    // The message last: it is the long field, and reads best after the verdict.
    return {
      source,
      cause,
      io: isIoCause(cause),
      ...(runtime && { runtime }),
      ...(name && { reservedName: name.raw }),
      ...(reservedFor && { reservedFor }),
      message,
    };
  });
}

/** One line for the source, one for the verdict, one for the head of the message. */
export function formatClassifyText(results: readonly ClassifyResult[]): string {
  if (results.length === 0) return 'No messages.\n';
  const blocks = results.map((r) => {
    const verdict = [`${r.cause} (${r.io ? 'IO' : 'not IO'})`];
    if (r.runtime) verdict.push(`runtime ${r.runtime}`);
    if (r.reservedName) verdict.push(`reserved ${r.reservedName}`);
    if (r.reservedFor) verdict.push(`held by ${r.reservedFor.slice(0, 12)}`);
    return `${r.source}\n  ${verdict.join('  ')}\n  ${shorten(r.message)}\n`;
  });
  return `${blocks.join('\n')}\n${summarise(results)}\n`;
}

function shorten(message: string): string {
  const line = message.replace(/\s+/g, ' ').trim();
  return line.length <= SHOWN_MESSAGE_CHARS ? line : `${line.slice(0, SHOWN_MESSAGE_CHARS - 1)}…`;
}

/** "3 messages: 2 IO (NameReserved 1, DeadlineExceeded 1), 1 not IO (Network 1)". */
function summarise(results: readonly ClassifyResult[]): string {
  const part = (io: boolean) => {
    const counts = new Map<FailureCause, number>();
    for (const r of results) if (r.io === io) counts.set(r.cause, (counts.get(r.cause) ?? 0) + 1);
    const total = [...counts.values()].reduce((a, b) => a + b, 0);
    const list = [...counts].sort(([a, x], [b, y]) => y - x || a.localeCompare(b));
    return `${total} ${io ? 'IO' : 'not IO'}${total ? ` (${list.map(([c, n]) => `${c} ${n}`).join(', ')})` : ''}`;
  };
  const n = results.length;
  return `${n} message${n === 1 ? '' : 's'}: ${part(true)}, ${part(false)}`;
}

export interface ClassifyFlags {
  output: 'text' | 'json';
}

export interface ClassifyIo {
  read: (file: string) => Promise<string>;
  write: (text: string) => void;
  error: (text: string) => void;
}

const processIo: ClassifyIo = {
  read: (file) => (file === '-' ? readStdin('messages, one per line') : readFile(file, 'utf8')),
  write: (text) => process.stdout.write(text),
  error: (text) => process.stderr.write(text),
};

/** Classifies the messages in the files (standard input for none or -). 0, or 2 when a file cannot be read. */
export async function runClassify(
  files: readonly string[],
  flags: ClassifyFlags,
  io: ClassifyIo = processIo,
): Promise<number> {
  const inputs: ClassifyInput[] = [];
  for (const file of files.length > 0 ? files : ['-']) {
    let text: string;
    try {
      text = await io.read(file);
    } catch (err) {
      io.error(`sandbox-remediator classify: cannot read ${file}: ${(err as Error).message}\n`);
      return 2;
    }
    inputs.push(...readClassifyInputs(text, file === '-' ? 'stdin' : file));
  }
  const results = classifyInputs(inputs);
  io.write(flags.output === 'json' ? `${JSON.stringify(results, null, 2)}\n` : formatClassifyText(results));
  return 0;
}
