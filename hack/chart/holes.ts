// Helm directives are not YAML, so the generator cannot write them into a parsed document. It writes a token
// instead (a plain scalar, a map key or a list item, which yaml prints on a line of its own), prints the document,
// escapes every `{{` that came from config/ (a PrometheusRule's `{{ $labels.node }}` is Prometheus', not Helm's),
// and only then puts the directives where the tokens are, indented as the token's line was.

import { stringify } from 'yaml';

const TOKEN = /__HELM_(\d+)__/g;

type Fill =
  /** Replaces the token where it stands, inside a longer scalar too; gets the indent of the token's line. */
  | { kind: 'inline'; text: (indent: number) => string }
  /** Replaces the whole line the token is on with these lines, each at that line's indent. */
  | { kind: 'line'; lines: (indent: number) => string[] };

export class Holes {
  private readonly fills: Fill[] = [];

  /** A token that becomes `text` (a Helm action or literal text) where it stands. */
  inline(text: string | ((indent: number) => string)): string {
    return this.add({ kind: 'inline', text: typeof text === 'string' ? () => text : text });
  }

  /** A token whose whole line becomes `lines` (directives and YAML, relative to the line's indent). */
  line(lines: string[] | ((indent: number) => string[])): string {
    return this.add({ kind: 'line', lines: typeof lines === 'function' ? lines : () => lines });
  }

  /** The printed YAML with config/'s `{{` escaped and every token filled in. */
  fill(printed: string): string {
    const out: string[] = [];
    for (const raw of escapeActions(printed).split('\n')) {
      const indent = raw.length - raw.trimStart().length;
      const tokens = [...raw.matchAll(TOKEN)].map((m) => this.at(m[1]));
      const whole = tokens.find((f) => f.kind === 'line');
      if (whole?.kind === 'line') {
        out.push(...whole.lines(indent).map((l) => (l === '' ? '' : ' '.repeat(indent) + l)));
        continue;
      }
      out.push(
        raw.replace(TOKEN, (_, i: string) => {
          const fill = this.at(i);
          return fill.kind === 'inline' ? fill.text(indent) : '';
        }),
      );
    }
    const left = out.join('\n').match(TOKEN);
    if (left) throw new Error(`unfilled chart tokens ${left.join(', ')}`);
    return out.join('\n');
  }

  private at(index: string | undefined): Fill {
    const fill = this.fills[Number(index)];
    if (!fill) throw new Error(`no chart token ${index}`);
    return fill;
  }

  private add(fill: Fill): string {
    this.fills.push(fill);
    return `__HELM_${this.fills.length - 1}__`;
  }
}

/** Text from config/ that Helm must print as it is: `{{` starts an action, so it is printed by one. */
export function escapeActions(text: string): string {
  return text.replaceAll('{{', '{{`{{`}}');
}

/** A string as a YAML scalar in a fragment, quoted only where YAML needs it. */
export function quoted(text: string): string {
  return escapeActions(stringify(text, { lineWidth: 0 }).trimEnd());
}
