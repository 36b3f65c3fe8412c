// The environment a manifest under config/ gives a container (literal values only), and the options the image's
// entrypoint gives node: benches run our processes with them, so they measure what is deployed.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT } from '../test/support/manifests.js';

interface Workload {
  kind?: string;
  spec?: {
    template?: { spec?: { containers?: { name: string; env?: { name: string; value?: string }[] }[] } };
  };
}

export function deployedEnv(manifest: string, kind: string, container: string): Record<string, string> {
  const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, manifest), 'utf8'));
  const workload = docs.map((d) => d.toJS() as Workload).find((o) => o.kind === kind);
  const found = workload?.spec?.template?.spec?.containers?.find((c) => c.name === container);
  if (!found) throw new Error(`no container ${container} in a ${kind} in ${manifest}`);
  const env: Record<string, string> = {};
  for (const e of found.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
  return env;
}

/**
 * The options for node itself in the last ENTRYPOINT of the Dockerfile under `root` (between `node` and the
 * script), so a bench starts the operator of that tree as its image would. Refuses an entrypoint it cannot read.
 */
export function imageNodeArgs(root: string): string[] {
  const lines = readFileSync(join(root, 'Dockerfile'), 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('ENTRYPOINT '));
  const entrypoint = JSON.parse(lines.at(-1)?.slice('ENTRYPOINT '.length) ?? 'null') as unknown;
  const script = Array.isArray(entrypoint) ? entrypoint.findIndex((a) => String(a).endsWith('.js')) : -1;
  if (!Array.isArray(entrypoint) || entrypoint[0] !== 'node' || script < 0)
    throw new Error(`${root}/Dockerfile: the ENTRYPOINT is not ["node", <options>, "<script>.js", ...]`);
  return entrypoint.slice(1, script).map(String);
}
