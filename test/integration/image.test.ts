// The image without a container engine: builds every stage of the Dockerfile in a temporary directory by
// following its own WORKDIR, COPY and RUN lines, then runs the last stage's ENTRYPOINT from what it copied, as
// its USER when this test runs as root. A path, stage or dependency that drifts fails here.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { REPO_ROOT } from '../support/manifests.js';

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
      const [image = '', as, name] = rest;
      stages.push({
        image,
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

/** RUN lines safe to execute on this machine; anything else (apt-get, curl) is refused, not run. */
const RUNNABLE = [/^npm ci(\s|$)/, /^npx --no-install tsc(\s|$)/];

/** A build step's environment: ours (npm's cache in HOME) without the npm settings of whoever ran mocha. */
const buildEnv = () => Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key)));
/** The image's environment: no HOME to write to, nothing of ours (NODE_OPTIONS, tsx) leaking in. */
const runtimeEnv = () => ({
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  NODE_ENV: 'production',
  HOME: '/nonexistent',
});

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(
  command: string,
  args: string[],
  cwd: string,
  {
    asUser,
    build = false,
    timeoutMs = 90_000,
  }: { asUser?: string; build?: boolean; timeoutMs?: number } = {},
): Promise<Result> {
  const [uid, gid] = (asUser ?? '').split(':');
  const [file, argv] =
    asUser === undefined
      ? [command, args]
      : ['setpriv', [`--reuid=${uid}`, `--regid=${gid ?? uid}`, '--clear-groups', command, ...args]];
  return new Promise((resolve) => {
    const child = spawn(file, argv, {
      cwd,
      env: build ? buildEnv() : runtimeEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: timeoutMs,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => {
      resolve({ code, stdout, stderr });
    });
  });
}

describe('the image, built from the Dockerfile without a container engine', function () {
  this.timeout(180_000);
  const stages = parseDockerfile(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'));
  const ignore = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const runtime = stages.at(-1)!;
  const root = mkdtempSync(join(tmpdir(), 'image-'));
  const dirOf = new Map<Stage, string>();
  // The image's USER when we can become it (root can), so unreadable files or a write would fail.
  const asUser = process.getuid?.() === 0 ? runtime.user : undefined;

  /** Where a path inside a stage's filesystem lives in this test's copy of that stage. */
  const local = (stage: Stage, path: string) => {
    const absolute = posix.resolve(stage.workdir, path);
    const relative = posix.relative(stage.workdir, absolute);
    if (relative.startsWith('..'))
      throw new Error(`${absolute} is outside ${stage.workdir}: not reproduced here`);
    return join(dirOf.get(stage)!, relative);
  };

  before(async function () {
    this.timeout(300_000);
    chmodSync(root, 0o755);
    for (const [index, stage] of stages.entries()) {
      const dir = join(root, stage.name ?? `stage-${index}`);
      mkdirSync(dir, { recursive: true });
      dirOf.set(stage, dir);
      for (const copy of stage.copies) {
        const source = copy.from === undefined ? undefined : stages.find((s) => s.name === copy.from);
        if (copy.from !== undefined && !source) throw new Error(`COPY --from=${copy.from}: no such stage`);
        for (const path of copy.sources) {
          const from = source ? local(source, path) : join(REPO_ROOT, path);
          if (!existsSync(from))
            throw new Error(`COPY ${copy.from ? `--from=${copy.from} ` : ''}${path}: missing`);
          const into = copy.dest.endsWith('/')
            ? join(local(stage, copy.dest), posix.basename(path))
            : local(stage, copy.dest);
          mkdirSync(dirname(into), { recursive: true });
          cpSync(from, into, { recursive: true });
        }
      }
      for (const command of stage.runs) {
        if (!RUNNABLE.some((r) => r.test(command))) throw new Error(`RUN ${command}: not reproduced here`);
        const result = await run('sh', ['-c', command], dir, { build: true, timeoutMs: 240_000 });
        expect(
          result.code,
          `RUN ${command} in ${stage.name ?? index}:\n${result.stdout}${result.stderr}`,
        ).to.equal(0);
      }
    }
  });
  after(() => {
    rmSync(root, { recursive: true, force: true });
  });

  const image = () => dirOf.get(runtime)!;
  const main = (...args: string[]) =>
    run(
      runtime.entrypoint![0]!,
      [...runtime.entrypoint!.slice(1), ...args],
      image(),
      asUser === undefined ? {} : { asUser },
    );

  it('compiles in one stage and ships only production dependencies on a Node 20 slim base, as a numeric non-root user', () => {
    const build = stages.find((s) => s.runs.some((r) => /\btsc -p tsconfig\.build\.json\b/.test(r)));
    expect(build, 'a stage that runs tsc -p tsconfig.build.json').to.not.equal(undefined);
    expect(build!.runs.some((r) => /^npm ci(\s|$)/.test(r) && !r.includes('--omit=dev'))).to.equal(true);
    expect(build!.image).to.match(/^node:20[\w.-]*$/);
    const installs = stages.flatMap((s) => s.runs.filter((r) => r.includes('--omit=dev')).map(() => s));
    expect(installs.length, 'one npm ci --omit=dev').to.equal(1);
    expect(runtime.copies.map((c) => c.from).filter((f) => f !== undefined)).to.have.members([
      build!.name,
      installs[0]!.name,
    ]);
    expect(runtime.image).to.match(/^node:20[\w.-]*-slim$/);
    expect(installs[0]!.image).to.equal(runtime.image); // the same libc as the runtime's
    expect(runtime.runs, 'nothing run in the final stage').to.deep.equal([]);
    const [uid, gid] = (runtime.user ?? '').split(':');
    expect(uid, 'USER uid').to.match(/^[1-9]\d*$/);
    if (gid !== undefined) expect(gid, 'USER gid').to.match(/^[1-9]\d*$/);
    expect(runtime.entrypoint).to.deep.equal(['node', '--optimize-for-size', 'dist/src/main.js']);
  });

  it('copies into the context only what the Dockerfile needs, never the local cluster or build output', () => {
    const fromContext = stages.flatMap((s) =>
      s.copies.filter((c) => c.from === undefined).flatMap((c) => c.sources),
    );
    for (const path of fromContext)
      expect(isIgnored(path, ignore), `${path} in .dockerignore`).to.equal(false);
    for (const path of ['.cluster', 'node_modules', 'dist', '.git', 'coverage', 'test'])
      expect(isIgnored(path, ignore), `${path} kept out of the build context`).to.equal(true);
  });

  it('holds the entrypoint, the production dependencies and the CRDs where the operator looks for them', async () => {
    for (const path of ['dist/src/main.js', 'package.json', 'node_modules/@kubernetes/client-node', 'crds'])
      expect(existsSync(join(image(), path)), path).to.equal(true);
    for (const dev of ['typescript', 'tsx', 'mocha', 'chai'])
      expect(existsSync(join(image(), 'node_modules', dev)), `dev dependency ${dev}`).to.equal(false);
    const located = await run(
      'node',
      [
        '--input-type=module',
        '-e',
        "console.log(JSON.stringify((await import('./dist/src/cli/operator.js')).crdFiles()))",
      ],
      image(),
      asUser === undefined ? {} : { asUser },
    );
    expect(located.code, located.stderr).to.equal(0);
    const files = JSON.parse(located.stdout) as string[];
    expect(files).to.have.length(2);
    for (const file of files) expect(dirname(file)).to.equal(join(image(), 'crds'));
  });

  it('serves --help for the program and each role', async () => {
    const top = await main('--help');
    expect(top.code, top.stderr).to.equal(0);
    expect(top.stdout).to.match(/Commands:[\s\S]*operator[\s\S]*agent[\s\S]*crds/);
    for (const [command, flag] of [
      ['operator', '--install-crds'],
      ['agent', '--proc-root'],
    ] as const) {
      const help = await main(command, '--help');
      expect(help.code, help.stderr).to.equal(0);
      expect(help.stdout).to.contain(flag);
    }
  });

  it('prints exactly the CRDs of crds/', async () => {
    const printed = await main('crds');
    expect(printed.code, printed.stderr).to.equal(0);
    const committed = ['sandboxpolicies', 'sandboxhealths'].map(
      (plural) =>
        parse(
          readFileSync(join(REPO_ROOT, 'crds', `${plural}.sandbox.remediator.io.yaml`), 'utf8'),
        ) as unknown,
    );
    expect(parseAllDocuments(printed.stdout).map((d) => d.toJS() as unknown)).to.deep.equal(committed);
  });

  it('loads every module with production dependencies only (a dev dependency used at run time fails here)', async () => {
    // main.js parses argv on import; the rest have no side effects on import.
    const script = `
      import { readdirSync } from 'node:fs';
      const files = readdirSync('dist/src', { recursive: true }).filter((f) => f.endsWith('.js') && f !== 'main.js');
      const failed = [];
      for (const f of files) await import('./dist/src/' + f).catch((e) => failed.push(f + ': ' + e.message));
      console.log(JSON.stringify({ loaded: files.length, failed }));`;
    const result = await run(
      'node',
      ['--input-type=module', '-e', script],
      image(),
      asUser === undefined ? {} : { asUser },
    );
    expect(result.code, result.stderr).to.equal(0);
    const { loaded, failed } = JSON.parse(result.stdout) as { loaded: number; failed: string[] };
    expect(failed).to.deep.equal([]);
    expect(loaded).to.be.greaterThan(30);
  });

  it('runs the agent from the image, which reads /proc and serves metrics, and stops on SIGTERM', async () => {
    const [file, argv] =
      asUser === undefined
        ? ['node', ['dist/src/main.js']]
        : [
            'setpriv',
            [
              `--reuid=${asUser.split(':')[0]}`,
              `--regid=${asUser.split(':')[1] ?? asUser.split(':')[0]}`,
              '--clear-groups',
              'node',
              'dist/src/main.js',
            ],
          ];
    const child = spawn(
      file,
      [
        ...argv,
        'agent',
        '--no-publish',
        '--node-name=image-test',
        '--proc-root=/proc',
        '--metrics-bind-address=127.0.0.1:0',
      ],
      { cwd: image(), env: runtimeEnv(), stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    let logs = '';
    child.stderr.on('data', (d: Buffer) => (logs += d.toString()));
    const deadline = Date.now() + 20_000;
    let port: number | undefined;
    while (port === undefined && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      const started = logs.split('\n').find((l) => l.includes('Started node agent'));
      if (started) port = (JSON.parse(started) as { metricsPort: number }).metricsPort;
    }
    try {
      expect(port, `agent did not start:\n${logs}`).to.be.a('number');
      let text = '';
      while (!text.includes('sandbox_remediator_agent_procs_blocked') && Date.now() < deadline) {
        text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(text).to.match(/^sandbox_remediator_agent_procs_blocked \d+$/m);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited, logs).to.equal(0);
  });
});
