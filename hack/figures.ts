// Keeps the figures the docs quote from bench/results/*.json true (issue 24: a figure in the docs that no results
// file holds goes stale without anyone noticing). Each quoted figure sits between markers (hack/figures/markers.ts
// has the syntax):
//
//   tsx hack/figures.ts            rewrites every span from the results (`make figures`, and `make bench` after it ran)
//   tsx hack/figures.ts --check    writes nothing; exits 1 naming each stale span and each marker that cannot be
//                                  rendered (`make verify`)
//
// The documents: README.md, bench/README.md and every .md under docs/ (or the files named on the command line).
// A rewritten document is formatted with prettier, since a figure that changes width re-pads its table.
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { updateDocument, type Finding } from './figures/markers.js';

const root = join(import.meta.dirname, '..');
const args = process.argv.slice(2);
const check = args.includes('--check');
const named = args.filter((a) => a !== '--check');
if (named.some((a) => a.startsWith('-'))) {
  console.error('usage: tsx hack/figures.ts [--check] [FILE.md ...]');
  process.exit(2);
}

const documents =
  named.length > 0
    ? named.map((f) => resolve(f))
    : [
        join(root, 'README.md'),
        join(root, 'bench', 'README.md'),
        ...(await readdir(join(root, 'docs'), { recursive: true }))
          .filter((f) => f.endsWith('.md'))
          .sort()
          .map((f) => join(root, 'docs', f)),
      ];

const results = new Map<string, unknown>();
async function loadResults(file: string): Promise<unknown> {
  if (!results.has(file)) {
    const text = await readFile(join(root, 'bench', 'results', file), 'utf8').catch(() => undefined);
    results.set(file, text === undefined ? undefined : JSON.parse(text));
  }
  return results.get(file);
}

let failed = false;
for (const path of documents) {
  const name = relative(root, path);
  const markdown = await readFile(path, 'utf8');
  // Load every results file a marker names first, so that the pure pass reads them from memory.
  for (const m of markdown.matchAll(/<!--\s*figure\s+([\w.-]+\.json)\s/g)) await loadResults(m[1] ?? '');
  const { text, findings } = updateDocument(markdown, (file) => results.get(file));
  const stale = findings.filter((f) => f.should !== undefined);
  const broken = findings.filter((f) => f.should === undefined);
  for (const f of broken) report(name, f);
  if (broken.length > 0) failed = true;
  if (check) {
    for (const f of stale) report(name, f);
    if (stale.length > 0) failed = true;
  } else if (text !== markdown) {
    await writeFile(path, await format(text, { ...((await resolveConfig(path)) ?? {}), filepath: path }));
    for (const f of stale) console.log(`${name}:${f.line}: ${f.says ?? ''} -> ${f.should ?? ''}`);
    console.log(`Wrote ${name} (${stale.length} figure${stale.length === 1 ? '' : 's'} from bench/results)`);
  }
}
if (failed && check)
  console.error('Run `make figures` to rewrite stale figures from bench/results, and commit them.');
process.exit(failed ? 1 : 0);

function report(name: string, f: Finding): void {
  console.error(`${name}:${f.line}: ${f.message}`);
}
