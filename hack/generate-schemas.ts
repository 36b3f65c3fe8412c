// Writes schemas/diagnosis.schema.json, the JSON Schema of `sandbox-remediator diagnose -o json`, from its zod schema
// in src/diagnose. With --check, writes nothing and exits 1 when the committed file differs (used by `make verify`).
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { diagnosisJsonSchema } from '../src/diagnose/schema.js';

const file = join(import.meta.dirname, '..', 'schemas', 'diagnosis.schema.json');
const check = process.argv.includes('--check');

// Formatted as `prettier --check .` wants it.
const options = (await resolveConfig(file)) ?? {};
const text = await format(JSON.stringify(diagnosisJsonSchema()), { ...options, parser: 'json' });
const current = await readFile(file, 'utf8').catch(() => '');
if (current !== text) {
  if (check) {
    console.error(`${file} is stale: run \`make manifests\` and commit the result`);
    process.exit(1);
  }
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, text);
  console.log(`Wrote ${file}`);
}
