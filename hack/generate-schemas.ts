// Writes schemas/diagnosis.schema.json, the JSON Schema of `sandbox-remediator diagnose -o json`, from its zod schema
// in src/diagnose. With --check, writes nothing and exits 1 when the committed file differs (used by `make verify`).
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { diagnosisJsonSchema } from '../src/diagnose/schema.js';

export const DIAGNOSIS_SCHEMA_FILE = join(import.meta.dirname, '..', 'schemas', 'diagnosis.schema.json');

/** The file's text, formatted as `prettier --check .` wants it. */
export async function diagnosisSchemaText(): Promise<string> {
  const options = (await resolveConfig(DIAGNOSIS_SCHEMA_FILE)) ?? {};
  return format(JSON.stringify(diagnosisJsonSchema()), { ...options, parser: 'json' });
}

if (process.argv[1] === import.meta.filename) {
  const check = process.argv.includes('--check');
  const text = await diagnosisSchemaText();
  const current = await readFile(DIAGNOSIS_SCHEMA_FILE, 'utf8').catch(() => '');
  if (current === text) process.exit(0);
  if (check) {
    console.error(`${DIAGNOSIS_SCHEMA_FILE} is stale: run \`make manifests\` and commit the result`);
    process.exit(1);
  }
  await mkdir(join(DIAGNOSIS_SCHEMA_FILE, '..'), { recursive: true });
  await writeFile(DIAGNOSIS_SCHEMA_FILE, text);
  console.log(`Wrote ${DIAGNOSIS_SCHEMA_FILE}`);
}
