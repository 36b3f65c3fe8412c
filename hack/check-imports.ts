// Import circles in src/ (issue 43): every relative import and re-export, type-only ones included, read with
// TypeScript's own pre-processor; a circle is a strongly connected set of files, or of folders (each file standing
// for its folder). Run by `make verify`, which fails naming each circle: the rings of eslint.config.js say which way
// an arrow may point, this says no arrow comes back round.
//
//   npx tsx hack/check-imports.ts [DIR]
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import ts from 'typescript';

const root = resolve(process.argv[2] ?? 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The files of src/ a file imports: `./x.js` is x.ts, a directory its index.ts. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const { importedFiles } = ts.preProcessFile(text, true, true);
  // `export * as ns from` is one form the pre-processor does not report.
  const namespaces = [...text.matchAll(/export\s+\*\s+as\s+\w+\s+from\s+['"]([^'"]+)['"]/g)].map(
    (m) => m[1] ?? '',
  );
  return [...importedFiles.map((f) => f.fileName), ...namespaces]
    .filter((name) => name.startsWith('.'))
    .map((name) => resolve(dirname(file), name).replace(/\.js$/, ''))
    .map((base) => (existsSync(`${base}.ts`) ? `${base}.ts` : join(base, 'index.ts')))
    .filter((path) => existsSync(path));
}

/** The strongly connected sets of more than one file (Tarjan), and files that import themselves. */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const at = (map: Map<string, number>, v: string) => map.get(v) ?? Infinity;
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, at(index, v));
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(at(low, v), at(low, w)));
      } else if (onStack.has(w)) low.set(v, Math.min(at(low, v), at(index, w)));
    }
    if (at(low, v) !== at(index, v)) return;
    const set: string[] = [];
    for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) {
      onStack.delete(w);
      set.push(w);
    }
    if (set.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(set.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/** The same imports between folders: a file's folder imports the folders of the files it imports (not its own). */
export function folderGraph(graph: ReadonlyMap<string, readonly string[]>): Map<string, string[]> {
  const folders = new Map<string, Set<string>>();
  for (const [file, imports] of graph) {
    const from = dirname(file);
    const to = folders.get(from) ?? new Set<string>();
    folders.set(from, to);
    for (const imported of imports) if (dirname(imported) !== from) to.add(dirname(imported));
  }
  return new Map([...folders].map(([folder, to]) => [folder, [...to].sort()]));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const graph = new Map(sources(root).map((file) => [file, importsOf(file)]));
  const found = [...circles(graph), ...circles(folderGraph(graph))];
  for (const set of found)
    console.error(`import circle: ${set.map((f) => relative(root, f) || '.').join(' -> ')}`);
  if (found.length > 0) {
    console.error(
      'break each circle: move what both sides need to the lower ring (docs/architecture.md, Rings)',
    );
    process.exit(1);
  }
}
