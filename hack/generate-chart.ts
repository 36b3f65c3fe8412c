// Writes charts/sandbox-remediator from config/ (docs/adr/0023-helm-chart.md): a template per file of config/'s
// kustomizations, the CRDs into crds/, Chart.yaml, and the defaults in values.yaml that mirror config/ (the rest of
// values.yaml, _helpers.tpl and NOTES.txt are written by hand). With --check, writes nothing and exits 1 naming
// every file that differs from what would be generated (used by `make verify`). --root DIR reads and checks another
// checkout (the generator's unit test).
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { planChart } from './chart/plan.js';

const args = process.argv.slice(2);
const check = args.includes('--check');
const rootAt = args.indexOf('--root');
const root = (rootAt >= 0 ? args[rootAt + 1] : undefined) ?? join(import.meta.dirname, '..');

const plan = await planChart(root);
let stale = 0;
for (const [path, text] of plan.write) {
  const file = join(root, path);
  if ((existsSync(file) ? readFileSync(file, 'utf8') : undefined) === text) continue;
  if (check) {
    console.error(`${path} is stale: run \`make manifests\` and commit the result`);
    stale++;
  } else {
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, text);
    console.log(`Wrote ${path}`);
  }
}
for (const path of plan.remove) {
  if (check) {
    console.error(`${path} was generated from a file config/ no longer has: run \`make manifests\``);
    stale++;
  } else {
    await rm(join(root, path));
    console.log(`Removed ${path}`);
  }
}
process.exit(stale > 0 ? 1 : 0);
