import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { hack, kubectl } from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';

const pinned = /KUBERNETES_VERSION=(\S+)/.exec(
  readFileSync(join(REPO_ROOT, 'hack/cluster/versions.env'), 'utf8'),
)?.[1];

describe('hack/cluster/up.sh', function () {
  it('reuses the running cluster on a second run, and keeps its nodes Ready', async function () {
    this.timeout(120_000);
    const again = await hack('up.sh');
    expect(again.code, again.stderr).to.equal(0);
    expect(again.stderr).to.contain('reusing the running cluster');
    const nodes = await kubectl(['get', 'nodes', '-l', 'type=kwok', '-o', 'name']);
    for (const name of ['kwok-node-0', 'kwok-node-1', 'kwok-node-2'])
      expect(nodes.stdout).to.contain(`node/${name}`);
    const version = await kubectl(['version', '-o', 'json']);
    expect(
      (JSON.parse(version.stdout) as { serverVersion: { gitVersion: string } }).serverVersion.gitVersion,
    ).to.equal(`v${pinned}`);
  });

  it('starts a cluster of its own with make cluster-up on a machine with no kubectl on the PATH', async function () {
    this.timeout(600_000);
    // The machine's PATH, with every kubectl taken out: each directory that has one is replaced by a copy
    // made of links to all its other programs.
    const scratch = await mkdtemp(join(tmpdir(), 'no-kubectl-'));
    try {
      const path: string[] = [];
      for (const [i, entry] of (process.env.PATH ?? '').split(delimiter).entries()) {
        const names = await readdir(entry).catch(() => [] as string[]);
        if (!names.some((n) => n.startsWith('kubectl'))) {
          path.push(entry);
          continue;
        }
        const copy = join(scratch, `bin${i}`);
        await mkdir(copy);
        for (const name of names.filter((n) => !n.startsWith('kubectl')))
          await symlink(join(entry, name), join(copy, name));
        path.push(copy);
      }
      const env = {
        ...process.env,
        PATH: path.join(delimiter),
        CLUSTER_DIR: join(scratch, 'cluster'),
        NODES: '1',
        KUBECTL: '',
      };
      const which = await run('bash', ['-c', 'command -v kubectl || echo none'], env);
      expect(which.stdout.trim(), 'kubectl is off the PATH').to.equal('none');

      const up = await run('make', ['cluster-up'], env);
      expect(up.code, up.stderr).to.equal(0);
      expect(up.stderr).to.contain('cluster up in');
      const kubectlBin = join(
        dirname(
          readFileSync(join(scratch, 'cluster', 'cmd', 'kube-apiserver'), 'utf8')
            .split(' ')
            .find((w) => w.endsWith('/kube-apiserver')) ?? '',
        ),
        'kubectl',
      );
      const nodes = await run(
        kubectlBin,
        ['--kubeconfig', join(scratch, 'cluster', 'kubeconfig'), 'get', 'nodes', '-o', 'name'],
        env,
      );
      expect(nodes.stdout).to.contain('node/kwok-node-0');
    } finally {
      const down = await run('make', ['cluster-down'], {
        ...process.env,
        CLUSTER_DIR: join(scratch, 'cluster'),
      });
      await rm(scratch, { recursive: true, force: true });
      expect(down.code, down.stderr).to.equal(0);
    }
  });
});

function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: REPO_ROOT, env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', (err) => {
      resolve({ code: -1, stdout, stderr: `${stderr}${err.message}` });
    });
    child.on('close', (code) => {
      resolve({ code, stdout, stderr });
    });
  });
}
