// `sandbox-remediator ARGS` through tsx, as a person runs it from this checkout, against the local cluster.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { REPO_ROOT } from './manifests.js';

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export async function runCli(args: string[]): Promise<CliRun> {
  const tsx = join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'esm', 'index.mjs');
  const child = spawn(process.execPath, ['--import', tsx, join(REPO_ROOT, 'src', 'main.ts'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NODE_V8_COVERAGE: '' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr };
}
