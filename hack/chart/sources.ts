// What the chart is made of: the files that config/'s kustomizations name, as kustomize reads them, each document
// parsed with its comments. A kustomize feature the generator does not apply (patches, images, a namePrefix, ...)
// is refused, not ignored: the chart would silently differ from what `kubectl apply -k` installs.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { Document, parse, parseAllDocuments } from 'yaml';

export interface Source {
  /** The file under config/ it came from (for a generated ConfigMap, its kustomization). */
  file: string;
  doc: Document;
  /** A ConfigMap from a configMapGenerator: its data keys and the config/ files they hold. */
  generatedFrom?: { key: string; file: string }[];
}

interface Kustomization {
  resources?: string[];
  configMapGenerator?: {
    name: string;
    namespace?: string;
    files?: string[];
    options?: { disableNameSuffixHash?: boolean; labels?: Record<string, string> };
  }[];
}

const KNOWN_FIELDS = new Set(['resources', 'configMapGenerator']);

/** Every object that `kubectl kustomize <path>` builds from, in its order (path: a folder or a file under root). */
export function readSources(root: string, path: string): Source[] {
  const full = join(root, path);
  if (!statSync(full).isDirectory()) return readFile(root, path);
  const kustomizationFile = join(full, 'kustomization.yaml');
  if (!existsSync(kustomizationFile)) throw new Error(`${path} has no kustomization.yaml`);
  const k = (parse(readFileSync(kustomizationFile, 'utf8')) ?? {}) as Kustomization;
  const unknown = Object.keys(k).filter((f) => !KNOWN_FIELDS.has(f));
  if (unknown.length > 0)
    throw new Error(
      `${path}/kustomization.yaml uses ${unknown.join(', ')}, which hack/generate-chart.ts does not apply: teach it (hack/chart/) first`,
    );
  const sources = (k.resources ?? []).flatMap((r) => readSources(root, relative(root, join(full, r))));
  for (const gen of k.configMapGenerator ?? []) sources.push(generatedConfigMap(root, path, gen));
  return sources;
}

function readFile(root: string, path: string): Source[] {
  const docs = parseAllDocuments(readFileSync(join(root, path), 'utf8'));
  return docs.map((doc) => {
    if (!(doc instanceof Document)) throw new Error(`${path}: not a YAML stream`);
    const [error] = doc.errors;
    if (error) throw new Error(`${path}: ${error.message}`);
    return { file: path, doc };
  });
}

function generatedConfigMap(
  root: string,
  path: string,
  gen: NonNullable<Kustomization['configMapGenerator']>[number],
): Source {
  if (!gen.options?.disableNameSuffixHash)
    throw new Error(
      `${path}: configMapGenerator ${gen.name} needs disableNameSuffixHash (a chart has no hash)`,
    );
  const files = (gen.files ?? []).map((entry) => {
    const [key = '', file = ''] = entry.includes('=') ? entry.split('=', 2) : [basename(entry), entry];
    return { key, file: relative(root, join(root, path, file)) };
  });
  const doc = new Document({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: gen.name,
      ...(gen.namespace ? { namespace: gen.namespace } : {}),
      ...(gen.options.labels ? { labels: gen.options.labels } : {}),
    },
    data: Object.fromEntries(files.map((f) => [f.key, ''])),
  });
  return { file: `${path}/kustomization.yaml`, doc, generatedFrom: files };
}

/** The folders right under config/, to tell the ones the chart is made from from the ones it leaves out. */
export function configFolders(root: string): string[] {
  return readdirSync(join(root, 'config'), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => `config/${e.name}`)
    .sort();
}
