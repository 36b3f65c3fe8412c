// PURE: the figures the docs quote from bench/results/*.json, and whether they still say what the results say.
//
// A quoted figure sits between two HTML comments, which Markdown renders as nothing and prettier leaves alone:
//
//   p50 <!-- figure detection-latency.json {p50Ms} ms -->42 ms<!-- /figure -->
//
// The opening names a results file (in bench/results/) and a template: literal text with placeholders
// `{EXPR}` or `{EXPR:FORMAT}`. EXPR is a dotted path into the file (`sizes.0.rssMiB`; a key that is not a plain
// word is quoted: `"crafted 100-pod node".head.medianMs`), a number, or arithmetic over them with + - * / and
// parentheses (`{sizes.0.startToReadyMs / 1000:.1} s`). FORMAT is `.N` (N decimals, rounded half away from zero
// on the decimal value, so 575 ms / 1000 is 0.58), `,` (thousands separators) or both (`,.1`); on a string, `.N`
// keeps its first N characters (`{trees.before.commit:.7}`). A bare path that holds null renders as `–`.
// A marker must not start a line: CommonMark reads such a line as a raw HTML block.

export interface Marker {
  /** 1-based line of the marker in its document. */
  line: number;
  /** The results file, relative to bench/results/. */
  file: string;
  template: string;
  /** What the document says between the markers. */
  text: string;
}

export interface Problem {
  line: number;
  message: string;
}

export interface Finding extends Problem {
  /** Set for a stale figure: what the document says and what the results say. */
  says?: string;
  should?: string;
}

/** Reads a results file by name; undefined when there is none. */
export type ReadResults = (file: string) => unknown;

const OPEN = /^<!--\s*figure\s+(\S+)\s+([\s\S]*?)\s*-->/;
const CLOSE = /^<!--\s*\/figure\s*-->/;
const ANY_MARKER = /<!--\s*\/?figure\b/g;
const RESULTS_FILE = /^[\w.-]+\.json$/;

/** Every marker of a Markdown document, outside fenced code blocks and code spans, and what is wrong with any. */
export function findMarkers(markdown: string): { markers: Marker[]; problems: Problem[] } {
  const markers: Marker[] = [];
  const problems: Problem[] = [];
  forEachProseLine(markdown, (line, masked, number) => {
    const found = scanLine(line, masked, number);
    markers.push(...found.spans.map((s) => s.marker));
    problems.push(...found.problems);
  });
  return { markers, problems };
}

/** Renders a template against a results file's content. */
export function renderTemplate(template: string, results: unknown): { text: string } | { error: string } {
  let text = '';
  let rest = template;
  for (;;) {
    const open = rest.indexOf('{');
    const close = rest.indexOf('}');
    if (open < 0) {
      if (close >= 0) return { error: `"}" without "{" in "${template}"` };
      return { text: text + rest };
    }
    if (close >= 0 && close < open) return { error: `"}" without "{" in "${template}"` };
    const end = closingBrace(rest, open);
    if (end < 0) return { error: `"{" without "}" in "${template}"` };
    const rendered = renderPlaceholder(rest.slice(open + 1, end), results);
    if ('error' in rendered) return rendered;
    text += rest.slice(0, open) + rendered.text;
    rest = rest.slice(end + 1);
  }
}

/** What is stale or broken in a document: each finding names its line. */
export function checkDocument(markdown: string, read: ReadResults): Finding[] {
  return updateDocument(markdown, read).findings;
}

/**
 * The document with every span rewritten from the results, and the findings: each stale span (rewritten) and each
 * marker that cannot be rendered (left as it is).
 */
export function updateDocument(markdown: string, read: ReadResults): { text: string; findings: Finding[] } {
  const findings: Finding[] = [];
  const lines = markdown.split('\n');
  forEachProseLine(markdown, (line, masked, number) => {
    // Positions come from the masked line (same length); the text written back is the line itself.
    const { spans, problems } = scanLine(line, masked, number);
    findings.push(...problems);
    let rewritten = '';
    let from = 0;
    for (const { marker, textStart, textEnd } of spans) {
      const results = read(marker.file);
      const rendered =
        results === undefined
          ? { error: 'no such file in bench/results/' }
          : renderTemplate(marker.template, results);
      rewritten += line.slice(from, textStart);
      if ('error' in rendered) {
        findings.push({ line: number, message: `${marker.file}: ${rendered.error}` });
        rewritten += marker.text;
      } else {
        if (rendered.text !== marker.text) {
          findings.push({
            line: number,
            message: `says "${marker.text}", ${marker.file} says "${rendered.text}" (${marker.template})`,
            says: marker.text,
            should: rendered.text,
          });
        }
        rewritten += rendered.text;
      }
      from = textEnd;
    }
    if (spans.length > 0) lines[number - 1] = rewritten + line.slice(from);
  });
  return { text: lines.join('\n'), findings };
}

interface Span {
  marker: Marker;
  /** Where the figure's text starts and ends in its line. */
  textStart: number;
  textEnd: number;
}

/** Calls back for each line outside fenced code blocks, with a copy whose code spans are blanked out (same length). */
function forEachProseLine(
  markdown: string,
  each: (line: string, masked: string, number: number) => void,
): void {
  let fence: string | undefined;
  for (const [i, line] of markdown.split('\n').entries()) {
    const opener = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence !== undefined) {
      if (opener !== undefined && opener[0] === fence[0] && opener.length >= fence.length) fence = undefined;
      continue;
    }
    if (opener !== undefined) {
      fence = opener;
      continue;
    }
    each(line, blankCodeSpans(line), i + 1);
  }
}

function blankCodeSpans(line: string): string {
  return line.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (span) => ' '.repeat(span.length));
}

/** The spans of one line: found in `masked` (code spans blanked), read from `line`. */
function scanLine(line: string, masked: string, number: number): { spans: Span[]; problems: Problem[] } {
  const spans: Span[] = [];
  const problems: Problem[] = [];
  const starts = [...masked.matchAll(ANY_MARKER)].map((m) => m.index);
  for (let k = 0; k < starts.length; k++) {
    const at = starts[k] ?? 0;
    // Found in the masked line, read from the line itself (a template may hold backticks).
    const open = OPEN.test(masked.slice(at)) ? OPEN.exec(line.slice(at)) : null;
    if (!open) {
      problems.push({
        line: number,
        message: CLOSE.test(masked.slice(at))
          ? 'a closing <!-- /figure --> without an opening'
          : 'a figure marker that is not <!-- figure FILE TEMPLATE -->',
      });
      continue;
    }
    const [opening, file = '', template = ''] = open;
    const next = starts[k + 1];
    const close = next === undefined ? null : CLOSE.exec(masked.slice(next));
    if (next === undefined || !close) {
      problems.push({
        line: number,
        message: `<!-- figure ${file} ... --> is not closed by <!-- /figure --> on its line`,
      });
      continue;
    }
    k++;
    if (/^\s*(?:(?:[-*+]|\d+[.)]|>)\s+)*$/.test(masked.slice(0, at))) {
      problems.push({
        line: number,
        message: 'a figure marker starts the line: Markdown would read it as raw HTML',
      });
    }
    if (!RESULTS_FILE.test(file)) {
      problems.push({ line: number, message: `"${file}" is not a file name in bench/results/ (NAME.json)` });
      continue;
    }
    const textStart = at + opening.length;
    spans.push({
      marker: { line: number, file, template, text: line.slice(textStart, next) },
      textStart,
      textEnd: next,
    });
  }
  return { spans, problems };
}

/** The index of the "}" closing the "{" at open, skipping quoted keys; -1 when there is none. */
function closingBrace(text: string, open: number): number {
  let quoted = false;
  for (let i = open + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '"') quoted = !quoted;
    else if (!quoted && c === '{') return -1;
    else if (!quoted && c === '}') return i;
  }
  return -1;
}

function renderPlaceholder(placeholder: string, results: unknown): { text: string } | { error: string } {
  const colon = lastUnquoted(placeholder, ':');
  const source = colon < 0 ? placeholder : placeholder.slice(0, colon);
  const format = colon < 0 ? undefined : /^(,?)(?:\.(\d+))?$/.exec(placeholder.slice(colon + 1).trim());
  if (colon >= 0 && (!format || placeholder.slice(colon + 1).trim() === '')) {
    return { error: `{${placeholder}}: the format is not .N, "," or ",.N"` };
  }
  const expression = parseExpression(source);
  if ('error' in expression) return { error: `{${placeholder}}: ${expression.error}` };
  const value = evaluate(expression.node, results);
  if ('error' in value) return { error: `{${placeholder}}: ${value.error}` };
  const grouped = format?.[1] === ',';
  const digits = format?.[2] === undefined ? undefined : Number(format[2]);
  const v = value.value;
  if (v === null) return { text: '–' };
  if (typeof v === 'number') return { text: formatNumber(v, digits, grouped) };
  if (typeof v === 'string') {
    if (grouped) return { error: `{${placeholder}}: "," on a string` };
    return { text: digits === undefined ? v : v.slice(0, digits) };
  }
  if (typeof v === 'boolean') return { text: String(v) };
  return {
    error: `{${placeholder}}: ${source.trim()} is ${Array.isArray(v) ? 'a list' : 'an object'}, not a value`,
  };
}

function lastUnquoted(text: string, char: string): number {
  let quoted = false;
  let at = -1;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '"') quoted = !quoted;
    else if (!quoted && text[i] === char) at = i;
  }
  return at;
}

export function formatNumber(value: number, digits: number | undefined, grouped: boolean): string {
  const plain = digits === undefined ? String(value) : toFixedDecimal(value, digits);
  if (!grouped) return plain;
  const [whole = '', fraction] = plain.split('.');
  const withCommas = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return fraction === undefined ? withCommas : `${withCommas}.${fraction}`;
}

/**
 * Rounded half away from zero on the number's shortest decimal form: 0.575 is 0.58, where toFixed says 0.57
 * (the double nearest 0.575 lies just below it).
 */
function toFixedDecimal(value: number, digits: number): string {
  const magnitude = String(Math.abs(value));
  if (magnitude.includes('e')) return value.toFixed(digits);
  const rounded = Math.round(Number(`${magnitude}e${digits}`)) / 10 ** digits;
  return (rounded === 0 ? 0 : Math.sign(value) * rounded).toFixed(digits);
}

type Node =
  | { kind: 'number'; value: number }
  | { kind: 'path'; segments: string[] }
  | { kind: 'op'; op: '+' | '-' | '*' | '/'; left: Node; right: Node };

type Token =
  { kind: 'number'; value: number } | { kind: 'path'; segments: string[] } | { kind: 'punct'; text: string };

function tokenize(source: string): Token[] | { error: string } {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source.charAt(i);
    if (/\s/.test(c)) {
      i++;
    } else if ('+-*/()'.includes(c)) {
      tokens.push({ kind: 'punct', text: c });
      i++;
    } else if (/\d/.test(c)) {
      const number = /^\d+(?:\.\d+)?/.exec(source.slice(i))?.[0] ?? c;
      tokens.push({ kind: 'number', value: Number(number) });
      i += number.length;
    } else {
      const segments: string[] = [];
      for (;;) {
        if (source[i] === '"') {
          const end = source.indexOf('"', i + 1);
          if (end < 0) return { error: 'a quoted key is not closed' };
          segments.push(source.slice(i + 1, end));
          i = end + 1;
        } else {
          const word = /^[\w$]+/.exec(source.slice(i))?.[0];
          if (word === undefined) return { error: `unexpected "${source.slice(i)}"` };
          segments.push(word);
          i += word.length;
        }
        if (source[i] !== '.') break;
        i++;
      }
      tokens.push({ kind: 'path', segments });
    }
  }
  return tokens;
}

function parseExpression(source: string): { node: Node } | { error: string } {
  const tokens = tokenize(source);
  if (!Array.isArray(tokens)) return tokens;
  if (tokens.length === 0) return { error: 'no path' };
  let at = 0;
  const peek = () => tokens[at];
  const isPunct = (t: Token | undefined, ...texts: string[]) => t?.kind === 'punct' && texts.includes(t.text);
  // expr := term (("+" | "-") term)*; term := factor (("*" | "/") factor)*; factor := NUMBER | PATH | "(" expr ")"
  const binary = (next: () => Node, ops: string[]) => (): Node => {
    let left = next();
    while (isPunct(peek(), ...ops)) {
      const op = (tokens[at++] as { text: '+' | '-' | '*' | '/' }).text;
      left = { kind: 'op', op, left, right: next() };
    }
    return left;
  };
  const factor = (): Node => {
    const t = tokens[at++];
    if (t === undefined) throw new Error('the expression ends early');
    if (t.kind === 'number' || t.kind === 'path') return t;
    if (t.text === '(') {
      const inner = expr();
      if (!isPunct(tokens[at++], ')')) throw new Error('"(" without ")"');
      return inner;
    }
    throw new Error(`unexpected "${t.text}"`);
  };
  const term = binary(factor, ['*', '/']);
  const expr = binary(term, ['+', '-']);
  try {
    const node = expr();
    if (at < tokens.length) return { error: 'unexpected text after the expression' };
    return { node };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

function evaluate(node: Node, results: unknown): { value: unknown } | { error: string } {
  if (node.kind === 'number') return { value: node.value };
  if (node.kind === 'path') return lookUp(results, node.segments);
  const left = evaluate(node.left, results);
  if ('error' in left) return left;
  const right = evaluate(node.right, results);
  if ('error' in right) return right;
  const [a, b] = [left.value, right.value];
  if (typeof a !== 'number' || typeof b !== 'number') {
    return { error: `${node.op} needs two numbers, got ${JSON.stringify(a)} and ${JSON.stringify(b)}` };
  }
  const value = node.op === '+' ? a + b : node.op === '-' ? a - b : node.op === '*' ? a * b : a / b;
  if (!Number.isFinite(value)) return { error: `${a} ${node.op} ${b} is not a finite number` };
  return { value };
}

/** A path as a marker writes it: keys that are not plain words quoted. */
function showPath(segments: readonly string[]): string {
  return segments.map((key) => (/^[\w$]+$/.test(key) ? key : `"${key}"`)).join('.');
}

function lookUp(results: unknown, segments: readonly string[]): { value: unknown } | { error: string } {
  let value = results;
  for (const [i, key] of segments.entries()) {
    const found =
      Array.isArray(value) && /^\d+$/.test(key)
        ? Number(key) < value.length
        : typeof value === 'object' && value !== null && Object.hasOwn(value, key);
    if (!found) return { error: `no ${showPath(segments.slice(0, i + 1))}` };
    value = (value as Record<string, unknown>)[key];
  }
  return { value };
}
