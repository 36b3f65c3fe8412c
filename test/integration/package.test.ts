// The CLI without a clone: `npm pack` gives the package a release publishes, which installs into an empty directory
// and runs `sandbox-remediator --help`, `validate`, `crds` and `diagnose` there (against the real cluster), and the
// same as the kubectl plugin `kubectl sandbox`, with nothing of this checkout's but the tarball.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VERSION } from '../../src/cli/version.js';
import { KUBECONFIG, resolveKubectl } from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command with npm's settings of whoever ran mocha left out. */
function run(file: string, args: string[], cwd: string, extra: Record<string, string> = {}): Promise<Result> {
  const env = {
    ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key))),
    ...extra,
  };
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { cwd, env, timeout: 300_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (((err as { code?: unknown }).code as number | undefined) ?? 1) : 0;
        resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
      },
    );
  });
}

describe('the CLI as an npm package, installed into an empty directory', function () {
  this.timeout(120_000);
  const work = mkdtempSync(join(tmpdir(), 'package-'));
  const user = join(work, 'user');
  let bin = '';

  before(async function () {
    this.timeout(600_000);
    // prepack compiles dist/; the package holds dist/src, crds and schemas, not the sources or the tests.
    const packed = await run('npm', ['pack', '--pack-destination', work, '--json'], REPO_ROOT);
    expect(packed.code, packed.stderr).to.equal(0);
    const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as {
      filename: string;
      files: { path: string }[];
    }[];
    const paths = info!.files.map((f) => f.path);
    expect(paths).to.include.members(['dist/src/main.js', 'package.json']);
    expect(
      paths.filter((p) => p.startsWith('src/') || p.startsWith('test/') || p.startsWith('.cluster')),
    ).to.deep.equal([]);
    const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
    expect(tarball).to.be.a('string');
    writeFileSync(join(work, 'package.json'), '{}'); // npm install --prefix needs no project; this keeps it here
    const installed = await run(
      'npm',
      [
        'install',
        '--prefix',
        user,
        '--omit=dev',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        join(work, tarball!),
      ],
      work,
    );
    expect(installed.code, installed.stderr).to.equal(0);
    bin = join(user, 'node_modules', '.bin', 'sandbox-remediator');
  });
  after(() => {
    rmSync(work, { recursive: true, force: true });
  });

  it('runs --help and prints the CRDs it ships', async () => {
    const help = await run(bin, ['--help'], user);
    expect(help.code, help.stderr).to.equal(0);
    for (const command of ['operator', 'agent', 'validate', 'diagnose', 'cleanup', 'crds'])
      expect(help.stdout, command).to.match(new RegExp(`^\\s+${command}\\b`, 'm'));
    const crds = await run(bin, ['crds'], user);
    expect(crds.code, crds.stderr).to.equal(0);
    expect(crds.stdout).to.contain('name: sandboxpolicies.sandbox.remediator.io');
  });

  it('validates a policy file, and lists every problem of a bad one', async () => {
    copyFileSync(join(REPO_ROOT, 'config/samples/sandboxpolicy-minimal.yaml'), join(user, 'policy.yaml'));
    const good = await run(bin, ['validate', 'policy.yaml'], user);
    expect(good.code, good.stdout + good.stderr).to.equal(0);
    writeFileSync(
      join(user, 'bad.yaml'),
      [
        'apiVersion: sandbox.remediator.io/v1alpha1',
        'kind: SandboxPolicy',
        'metadata: { name: bad }',
        'spec:',
        '  nodeSelector: { matchLabels: { pool: a } }',
        '  safety: { maxEvictionsPerMinute: -1, cooldownSeconds: banana }',
        '',
      ].join('\n'),
    );
    const bad = await run(bin, ['validate', 'bad.yaml'], user);
    expect(bad.code).to.equal(1);
    expect(bad.stdout + bad.stderr)
      .to.contain('maxEvictionsPerMinute')
      .and.contain('cooldownSeconds');
  });

  it('reports the release version, and is a kubectl plugin: kubectl runs its kubectl-sandbox as `kubectl sandbox`', async () => {
    const version = await run(bin, ['--version'], user);
    expect(version.stdout.trim(), 'package.json, config/ and the chart carry the same one').to.equal(VERSION);
    // As npm install -g puts it on a user's PATH; kubectl hands the plugin every argument and the environment.
    const path = { PATH: `${join(user, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`, KUBECONFIG };
    const plugins = await run(resolveKubectl(), ['plugin', 'list'], user, path);
    expect(plugins.stdout).to.contain(join(user, 'node_modules', '.bin', 'kubectl-sandbox'));
    const help = await run(resolveKubectl(), ['sandbox', '--help'], user, path);
    expect(help.code, help.stderr).to.equal(0);
    expect(help.stdout).to.match(/^Usage: kubectl sandbox /m);
    const diagnosed = await run(resolveKubectl(), ['sandbox', 'diagnose', '-o', 'json'], user, path);
    expect(diagnosed.code, diagnosed.stderr).to.equal(0);
    expect(JSON.parse(diagnosed.stdout)).to.be.an('object');
  });

  it('diagnoses against the real cluster', async () => {
    const diagnosed = await run(bin, ['diagnose', `--kubeconfig=${KUBECONFIG}`, '-o', 'json'], user);
    expect(diagnosed.code, diagnosed.stderr).to.equal(0);
    expect(() => JSON.parse(diagnosed.stdout) as unknown).to.not.throw();
  });
});
