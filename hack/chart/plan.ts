// What `make manifests` writes into the chart, and what it removes: the rendered templates, crds/ and files/,
// Chart.yaml from package.json and config/, and values.yaml with config/'s defaults written into it.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { parseDocument, stringify } from 'yaml';
import { CHART, MARKER, renderChart } from './render.js';

export interface Plan {
  /** Path under root -> the content it must have. */
  write: Map<string, string>;
  /** Generated files no file of config/ makes any more. */
  remove: string[];
}

export async function planChart(root: string): Promise<Plan> {
  const { files, defaults } = renderChart(root);
  const write = new Map([...files].map(([path, text]) => [`${CHART}/${path}`, text]));
  write.set(`${CHART}/Chart.yaml`, await prettierYaml(root, chartYaml(root, String(defaults['image.tag']))));
  write.set(`${CHART}/values.yaml`, await prettierYaml(root, valuesWithDefaults(root, defaults)));
  const generated = [
    ...filesUnder(root, `${CHART}/crds`),
    ...filesUnder(root, `${CHART}/files`),
    ...filesUnder(root, `${CHART}/templates`).filter((f) =>
      readFileSync(join(root, f), 'utf8').includes(MARKER),
    ),
  ];
  return { write, remove: generated.filter((f) => !write.has(f)).sort() };
}

function chartYaml(root: string, appVersion: string): string {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    version: string;
    description: string;
  };
  const chart = {
    apiVersion: 'v2',
    name: 'sandbox-remediator',
    description: pkg.description,
    type: 'application',
    version: pkg.version,
    appVersion,
    // ValidatingAdmissionPolicy v1 (the admission policies).
    kubeVersion: '>=1.30.0-0',
  };
  return `# ${MARKER} from package.json (version) and config/ (appVersion: the image's tag). Do not edit.\n${stringify(chart, { lineWidth: 0 })}`;
}

/** values.yaml as written by hand, with each default that mirrors config/ set to config/'s value. */
function valuesWithDefaults(root: string, defaults: Record<string, unknown>): string {
  const file = join(root, CHART, 'values.yaml');
  const doc = parseDocument(existsSync(file) ? readFileSync(file, 'utf8') : '{}');
  for (const [path, value] of Object.entries(defaults)) {
    const keys = path.split('.');
    if (JSON.stringify(doc.getIn(keys)) === JSON.stringify(value)) continue;
    doc.setIn(keys, doc.createNode(value, { flow: typeof value === 'object' }));
  }
  return doc.toString({ lineWidth: 110 });
}

async function prettierYaml(root: string, text: string): Promise<string> {
  const options = (await resolveConfig(join(root, CHART, 'values.yaml'))) ?? {};
  return format(text, { ...options, parser: 'yaml' });
}

function filesUnder(root: string, dir: string): string[] {
  const full = join(root, dir);
  if (!existsSync(full)) return [];
  return readdirSync(full, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(root, join(e.parentPath, e.name)));
}
