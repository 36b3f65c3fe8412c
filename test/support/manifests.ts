import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';

export const REPO_ROOT = join(import.meta.dirname, '..', '..');

export interface Manifest {
  file: string;
  object: { apiVersion: string; kind: string; metadata: { name: string }; spec?: unknown };
}

/** Every YAML document in a folder of the repository, with the file it came from. */
export function readManifests(folder: string): Manifest[] {
  const dir = join(REPO_ROOT, folder);
  return readdirSync(dir)
    .filter((name) => name.endsWith('.yaml'))
    .sort()
    .flatMap((name) =>
      parseAllDocuments(readFileSync(join(dir, name), 'utf8')).map((doc) => ({
        file: `${folder}/${name}`,
        object: doc.toJS() as Manifest['object'],
      })),
    );
}
