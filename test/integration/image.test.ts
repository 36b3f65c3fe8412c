// The image as built here: hack/image/build.sh makes it from Debian's archive with no container engine (make image
// does so on a machine without one), and this test reads the OCI archive it wrote, unpacks its layers, and runs the
// image's own Node.js on the image's own files: chrooted into them, read-only, as the image's USER, in a mount
// namespace of its own, with the host's /proc mounted where the agent's DaemonSet mounts it. The Dockerfile (for an
// engine) must describe the same image: the same Node.js major, USER, WORKDIR, ENTRYPOINT and files. It runs the CLI there too (validate, diagnose
// against the real cluster), as a user runs it with the image.
import { expect } from 'chai';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { IMAGE_REPOSITORY, findVersions } from '../../hack/release/versions.js';
import { KUBECONFIG } from '../support/cluster.js';
import { applyCrds } from '../support/operator-process.js';
import { REPO_ROOT } from '../support/manifests.js';

const SAMPLE = 'config/samples/sandboxpolicy-minimal.yaml';

interface Copy {
  from?: string;
  sources: string[];
  dest: string;
}

interface Stage {
  name?: string;
  image: string;
  workdir: string;
  copies: Copy[];
  runs: string[];
  /** FROM --platform=: where a build stage runs. */
  platform?: string;
  user?: string;
  entrypoint?: string[];
}

/** The instructions this test can reproduce; any other one fails the test rather than being skipped. */
function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  for (const line of lines) {
    const [instruction = '', ...rest] = line.split(/\s+/);
    const args = rest.join(' ');
    const stage = stages.at(-1);
    if (instruction.toUpperCase() === 'FROM') {
      // --platform=$BUILDPLATFORM: a build stage runs where the build does; the image is the same.
      const platform = rest.find((a) => a.startsWith('--platform='))?.slice('--platform='.length);
      const [image = '', as, name] = rest.filter((a) => !a.startsWith('--platform='));
      stages.push({
        image,
        ...(platform ? { platform } : {}),
        ...(as?.toUpperCase() === 'AS' && name ? { name } : {}),
        workdir: '/',
        copies: [],
        runs: [],
      });
      continue;
    }
    if (!stage) throw new Error(`Dockerfile: ${instruction} before FROM`);
    switch (instruction.toUpperCase()) {
      case 'WORKDIR':
        stage.workdir = posix.resolve(stage.workdir, args);
        break;
      case 'COPY': {
        const flags = rest.filter((a) => a.startsWith('--'));
        const paths = rest.filter((a) => !a.startsWith('--'));
        const unknown = flags.filter((f) => !f.startsWith('--from='));
        if (unknown.length > 0)
          throw new Error(`Dockerfile: COPY ${unknown.join(' ')} is not reproduced here`);
        const from = flags[0]?.slice('--from='.length);
        stage.copies.push({
          ...(from ? { from } : {}),
          sources: paths.slice(0, -1),
          dest: paths.at(-1) ?? '',
        });
        break;
      }
      case 'RUN':
        stage.runs.push(args);
        break;
      case 'USER':
        stage.user = args;
        break;
      case 'ENTRYPOINT':
        stage.entrypoint = JSON.parse(args) as string[];
        break;
      case 'ENV':
        break;
      default:
        throw new Error(`Dockerfile: ${instruction} is not reproduced by this test; teach it`);
    }
  }
  return stages;
}

/**
 * Whether .dockerignore keeps a path out of the build context. Plain names, `*` and `!` only, last match wins,
 * a directory's rule covering what is inside it (as Docker's matcher does for these patterns).
 */
function isIgnored(path: string, patterns: string[]): boolean {
  let ignored = false;
  for (const raw of patterns) {
    const negated = raw.startsWith('!');
    const pattern = (negated ? raw.slice(1) : raw).replace(/\/$/, '');
    const matches = pattern === '*' || path === pattern || path.startsWith(`${pattern}/`);
    if (matches) ignored = !negated;
  }
  return ignored;
}

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface ImageConfig {
  config: { User: string; WorkingDir: string; Entrypoint: string[]; Env: string[] };
}

const ARCHIVE = join(REPO_ROOT, '.image', 'sandbox-remediator.oci.tar');
/** The image config/ names, as make image builds it by default. */
const RELEASE_IMAGE = `${IMAGE_REPOSITORY}:${findVersions(REPO_ROOT)[0]!.version!}`;
const blob = (layout: string, digest: string) =>
  join(layout, 'blobs', 'sha256', digest.replace(/^sha256:/, ''));
const readJson = (path: string): unknown => JSON.parse(readFileSync(path, 'utf8'));

/**
 * Runs `argv` inside the unpacked image: a private mount namespace, the root made read-only, the host's /proc at
 * /host/proc (read-only), then chroot as the image's USER into its WORKDIR with only its ENV.
 */
function inImage(root: string, config: ImageConfig['config'], argv: string[]) {
  // The root read-only first (a bind of it carries no submounts), then what a runtime mounts on it: a /proc of the
  // container's own (a new PID namespace's) and, for the agent, the host's at /host/proc.
  const script = [
    'set -e',
    `mount --bind "$1" "$1"`,
    `mount -o remount,bind,ro "$1"`,
    `mount --bind /proc "$1/host/proc"`,
    `mount -o remount,bind,ro "$1/host/proc"`,
    `mount -t proc proc "$1/proc"`,
    'shift',
    'exec "$@"',
  ].join('\n');
  return spawn(
    'unshare',
    [
      '--mount',
      '--propagation=private',
      '--pid',
      '--fork',
      'sh',
      '-c',
      script,
      'sh',
      root,
      'chroot',
      `--userspec=${config.User}`,
      root,
      '/usr/bin/env',
      '-i',
      '-C',
      config.WorkingDir,
      ...config.Env,
      'HOME=/nonexistent',
      ...argv,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
}

function run(root: string, config: ImageConfig['config'], argv: string[]): Promise<Result> {
  const child = inImage(root, config, argv);
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe("the image, built from Debian's archive without a container engine, run from its own files", function () {
  this.timeout(180_000);
  const stages = parseDockerfile(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'));
  const runtime = stages.at(-1)!;
  const ignore = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const versions = Object.fromEntries(
    readFileSync(join(REPO_ROOT, 'hack/image/versions.env'), 'utf8')
      .split('\n')
      .filter((l) => /^[A-Z_]+=/.test(l))
      .map((l) => l.split('=') as [string, string]),
  );
  const work = mkdtempSync(join(tmpdir(), 'image-'));
  const layout = join(work, 'layout');
  const root = join(work, 'root');
  let config: ImageConfig['config'];
  let annotations: Record<string, string>;

  before(async function () {
    this.timeout(600_000);
    if (process.getuid?.() !== 0)
      throw new Error('this test builds and unpacks the image as root (mmdebstrap, chroot)');
    // The build: the cached base layer (from Debian's archive the first time), then tsc and npm ci --omit=dev
    // (--prefer-offline: npm's cache, which make deps filled).
    const built = await new Promise<Result>((resolve) => {
      const child = spawn('hack/image/build.sh', [RELEASE_IMAGE, ARCHIVE], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
        // The base built before, if any, with no look at Debian's archive (make image refreshes it).
        env: {
          ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key))),
          IMAGE_CACHED_BASE: '1',
        },
      });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('close', (code) => {
        resolve({ code, stdout: '', stderr });
      });
    });
    expect(built.code, built.stderr).to.equal(0);
    mkdirSync(layout, { recursive: true });
    mkdirSync(root, { recursive: true });
    execFileSync('tar', ['-xf', ARCHIVE, '-C', layout]);
    const index = readJson(join(layout, 'index.json')) as {
      manifests: { digest: string; annotations: Record<string, string> }[];
    };
    annotations = index.manifests[0]!.annotations;
    const manifest = readJson(blob(layout, index.manifests[0]!.digest)) as {
      config: { digest: string };
      layers: { digest: string }[];
    };
    config = (readJson(blob(layout, manifest.config.digest)) as ImageConfig).config;
    for (const layer of manifest.layers)
      execFileSync('tar', ['-xzf', blob(layout, layer.digest), '-C', root]);
    mkdirSync(join(root, 'host', 'proc'), { recursive: true });
    mkdirSync(join(root, 'tmp'), { recursive: true });
  });
  after(() => {
    rmSync(work, { recursive: true, force: true });
  });

  it('is named as the kubelet asks for it, and runs as a numeric non-root user from /app, as the Dockerfile says', () => {
    // The release's own name (config/ and the chart's default), fully qualified already.
    expect(annotations['io.containerd.image.name']).to.equal(RELEASE_IMAGE);
    expect(config.User).to.match(/^[1-9]\d*:[1-9]\d*$/);
    expect(config.User, "the Dockerfile's USER").to.equal(runtime.user);
    expect(config.WorkingDir, 'its WORKDIR').to.equal(runtime.workdir);
    expect(config.Entrypoint, 'its ENTRYPOINT').to.deep.equal(runtime.entrypoint);
    expect(config.Entrypoint).to.deep.equal(['node', '--optimize-for-size', 'dist/src/main.js']);
    expect(config.Env).to.include('NODE_ENV=production');
  });

  it("bases both on the same Node.js LTS major, in support, and the Dockerfile's final stage runs nothing", async () => {
    const major = versions.IMAGE_NODE_MAJOR;
    expect(Number(major), 'an LTS in support (even, 22 or later)').to.be.at.least(22);
    for (const stage of stages) expect(stage.image, 'every FROM').to.match(new RegExp(`^node:${major}-`));
    expect(runtime.image).to.match(/-slim$/);
    expect(runtime.runs, 'nothing run in the final stage').to.deep.equal([]);
    // A multi-arch build emulates nothing: the stages that run something run on the builder's platform, and the
    // final one, which runs nothing, is the target's.
    for (const stage of stages.filter((s) => s.runs.length > 0))
      expect(stage.platform, `${stage.name ?? stage.image} runs on the builder`).to.equal('$BUILDPLATFORM');
    expect(runtime.platform, 'the final stage is per platform').to.equal(undefined);
    const node = await run(root, config, ['node', '--version']);
    expect(node.code, node.stderr).to.equal(0);
    expect(node.stdout.trim(), "the image's own Node.js").to.match(new RegExp(`^v${major}\\.`));
  });

  it('holds what the Dockerfile copies, the production dependencies only, and the CRDs where the operator looks', async () => {
    for (const copy of runtime.copies) {
      const dest = posix.resolve(runtime.workdir, copy.dest);
      for (const source of copy.sources) {
        const path = copy.dest.endsWith('/') ? posix.join(dest, posix.basename(source)) : dest;
        expect(existsSync(join(root, path)), `${path} (COPY ${source})`).to.equal(true);
      }
    }
    expect(existsSync(join(root, 'app/node_modules/@kubernetes/client-node'))).to.equal(true);
    for (const dev of ['typescript', 'tsx', 'mocha', 'chai'])
      expect(existsSync(join(root, 'app/node_modules', dev)), `dev dependency ${dev}`).to.equal(false);
    const located = await run(root, config, [
      'node',
      '--input-type=module',
      '-e',
      "console.log(JSON.stringify((await import('./dist/src/cli/operator.js')).crdFiles()))",
    ]);
    expect(located.code, located.stderr).to.equal(0);
    expect(JSON.parse(located.stdout)).to.have.members([
      '/app/crds/sandboxhealths.sandbox.remediator.io.yaml',
      '/app/crds/sandboxpolicies.sandbox.remediator.io.yaml',
    ]);
  });

  it("copies into the engine's context only what the Dockerfile needs, never the local cluster or build output", () => {
    const fromContext = stages.flatMap((s) =>
      s.copies.filter((c) => c.from === undefined).flatMap((c) => c.sources),
    );
    for (const path of fromContext)
      expect(isIgnored(path, ignore), `${path} in .dockerignore`).to.equal(false);
    for (const path of ['.cluster', '.image', 'node_modules', 'dist', '.git', 'coverage', 'test'])
      expect(isIgnored(path, ignore), `${path} kept out of the build context`).to.equal(true);
  });

  it('serves --help for the program and each role, and prints exactly the CRDs of crds/', async () => {
    const entry = config.Entrypoint;
    const top = await run(root, config, [...entry, '--help']);
    expect(top.code, top.stderr).to.equal(0);
    expect(top.stdout).to.match(/Commands:[\s\S]*operator[\s\S]*agent[\s\S]*crds/);
    for (const [command, flag] of [
      ['operator', '--install-crds'],
      ['agent', '--proc-root'],
    ] as const) {
      const help = await run(root, config, [...entry, command, '--help']);
      expect(help.code, help.stderr).to.equal(0);
      expect(help.stdout).to.contain(flag);
    }
    const printed = await run(root, config, [...entry, 'crds']);
    expect(printed.code, printed.stderr).to.equal(0);
    const committed = ['sandboxpolicies', 'sandboxhealths'].map(
      (plural) =>
        parse(
          readFileSync(join(REPO_ROOT, 'crds', `${plural}.sandbox.remediator.io.yaml`), 'utf8'),
        ) as unknown,
    );
    expect(parseAllDocuments(printed.stdout).map((d) => d.toJS() as unknown)).to.deep.equal(committed);
  });

  it('runs the CLI as the package does: validate on a policy file, diagnose against the real cluster', async () => {
    const entry = config.Entrypoint;
    // What a user mounts (docker run -v): files the image's user may read.
    writeFileSync(join(root, 'tmp', 'policy.yaml'), readFileSync(join(REPO_ROOT, SAMPLE)), { mode: 0o644 });
    writeFileSync(join(root, 'tmp', 'kubeconfig'), readFileSync(KUBECONFIG), { mode: 0o644 });
    const validated = await run(root, config, [...entry, 'validate', '/tmp/policy.yaml']);
    expect(validated.code, validated.stdout + validated.stderr).to.equal(0);
    await applyCrds(); // diagnose reads the operator's objects: on a cluster no other test has used, there are none
    const withKubeconfig = { ...config, Env: [...config.Env, 'KUBECONFIG=/tmp/kubeconfig'] };
    const diagnosed = await run(root, withKubeconfig, [...entry, 'diagnose', '-o', 'json']);
    expect(diagnosed.code, diagnosed.stderr).to.equal(0);
    expect(JSON.parse(diagnosed.stdout)).to.be.an('object');
  });

  it('loads every module with production dependencies only (a dev dependency used at run time fails here)', async () => {
    // main.js parses argv on import; the rest have no side effects on import.
    const script = `
      import { readdirSync } from 'node:fs';
      const files = readdirSync('dist/src', { recursive: true }).filter((f) => f.endsWith('.js') && f !== 'main.js');
      const failed = [];
      for (const f of files) await import('./dist/src/' + f).catch((e) => failed.push(f + ': ' + e.message));
      console.log(JSON.stringify({ loaded: files.length, failed }));`;
    const result = await run(root, config, ['node', '--input-type=module', '-e', script]);
    expect(result.code, result.stderr).to.equal(0);
    const { loaded, failed } = JSON.parse(result.stdout) as { loaded: number; failed: string[] };
    expect(failed).to.deep.equal([]);
    expect(loaded).to.be.greaterThan(30);
  });

  it("runs the agent as the DaemonSet does, reading the host's /proc from inside the image, and stops on SIGTERM", async () => {
    const child = inImage(root, config, [
      ...config.Entrypoint,
      'agent',
      '--no-publish',
      '--node-name=image-test',
      '--proc-root=/host/proc',
      '--metrics-bind-address=127.0.0.1:0',
      // This host runs no kubelet, so it has no pods' cgroups to attribute the IO to: with the disk busy (make test's
      // stress-ng in the other shard), attribution would count that as a read problem of the host, not of the image.
      '--no-attribution',
    ]);
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    let logs = '';
    child.stderr.on('data', (d: Buffer) => (logs += d.toString()));
    const deadline = Date.now() + 30_000;
    let port: number | undefined;
    while (port === undefined && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      const started = logs.split('\n').find((l) => l.includes('Started node agent'));
      if (started) port = (JSON.parse(started) as { metricsPort: number }).metricsPort;
    }
    try {
      expect(port, `agent did not start:\n${logs}`).to.be.a('number');
      let text = '';
      // Disk figures come from the second sample on (they are rates).
      while (!text.includes('sandbox_remediator_agent_disk_busy_percent{') && Date.now() < deadline) {
        text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(text).to.match(/^sandbox_remediator_agent_procs_blocked \d+$/m);
      // The host's disks, read from the host's /proc/diskstats: the image has none of its own.
      expect(text).to.match(/^sandbox_remediator_agent_disk_busy_percent\{[^}]+\} \d/m);
      expect(text, `nothing it could not read; its log:\n${logs}`).to.match(
        /^sandbox_remediator_agent_read_problems_total 0$/m,
      );
    } finally {
      // To the agent (PID 1 of its namespace, under unshare), as the kubelet stops a container.
      execFileSync('pkill', ['-TERM', '-P', String(child.pid)]);
    }
    expect(await exited, logs).to.equal(0);
  });
});
