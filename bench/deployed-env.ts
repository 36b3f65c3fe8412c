// The environment a manifest under config/ gives a container (literal values only): benches run our processes
// with it, so they measure what is deployed.
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
