// The README's install, first policy and uninstall, run as written: every bash block the README marks
// `<!-- run as written by test/integration/readme.test.ts -->`, in order, by bash from the checkout's root, against
// the local cluster, with kubectl, helm and the CLI (`sandbox-remediator`, as npm install -g puts it) on the PATH.
// Between the install and the first policy the operator runs as the Deployment would (kwok's nodes run no process):
// this checkout's operator with a token of the ServiceAccount the chart created, so the chart's RBAC is what it has.
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import {
  Cleanup,
  eventually,
  KUBECONFIG,
  kubectl,
  resolveKubectl,
  type CommandResult,
} from '../support/cluster.js';
import { displaceClusterObjects, helmBinary, putBack } from '../support/helm.js';
import { REPO_ROOT } from '../support/manifests.js';
import type { KubeObject } from '../support/monitoring-config.js';
import {
  applyCrds,
  applyRbac,
  startAsServiceAccount,
  type OperatorProcess,
} from '../support/operator-process.js';

const MARKER = '<!-- run as written by test/integration/readme.test.ts -->';
const NAMESPACES = ['sandbox-remediator-system', 'sandbox-remediator-agent'];

/** The marked blocks, in the README's order. */
function markedBlocks(readme: string): string[] {
  const blocks: string[] = [];
  let at = readme.indexOf(MARKER);
  while (at >= 0) {
    const fence = /```bash\n([\s\S]*?)```/.exec(readme.slice(at));
    if (!fence?.[1]) throw new Error('a marker with no bash block after it');
    blocks.push(fence[1]);
    at = readme.indexOf(MARKER, at + MARKER.length);
  }
  return blocks;
}

describe("the README's install, first policy and uninstall, run as written", function () {
  this.timeout(300_000);
  const cleanup = new Cleanup();
  const work = mkdtempSync(join(tmpdir(), 'readme-'));
  const bin = join(work, 'bin');
  const blocks = markedBlocks(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8'));
  let displaced: KubeObject[] = [];
  let operator: OperatorProcess | undefined;

  /** Both namespaces deleted to the end (a terminating one refuses what config/rbac puts in it). */
  const namespacesGone = () =>
    eventually(
      'the namespaces gone',
      async () => {
        for (const namespace of NAMESPACES) {
          const got = await kubectl(['get', 'namespace', namespace]);
          if (got.code === 0 || !got.stderr.includes('NotFound')) return false;
        }
        return true;
      },
      { timeoutMs: 120_000, intervalMs: 500 },
    );

  const bash = (script: string): Promise<CommandResult> =>
    new Promise((resolve) => {
      const env = {
        ...process.env,
        KUBECONFIG,
        PATH: [bin, dirname(helmBinary()), process.env.PATH ?? ''].join(':'),
      };
      execFile(
        'bash',
        ['-euo', 'pipefail', '-c', script],
        { cwd: REPO_ROOT, env, timeout: 240_000, maxBuffer: 16 * 1024 * 1024 },
        (err, stdout, stderr) => {
          resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
        },
      );
    });

  before(async function () {
    this.timeout(300_000);
    // kubectl, helm and sandbox-remediator under those names, as a user's PATH has them.
    mkdirSync(bin);
    const kubectlPath = resolveKubectl();
    if (kubectlPath.startsWith('/')) symlinkSync(kubectlPath, join(bin, 'kubectl')); // else the PATH's own
    const cli = join(bin, 'sandbox-remediator');
    writeFileSync(
      cli,
      `#!/bin/sh\nexec "${REPO_ROOT}/node_modules/.bin/tsx" "${REPO_ROOT}/src/main.ts" "$@"\n`,
    );
    chmodSync(cli, 0o755);
    // Put back first, whatever fails below (each step on its own, in this order when run): the namespaces gone, the
    // CRDs, the displaced objects, then config/rbac and its namespaces, which the tests after this one need.
    cleanup.add(() => applyRbac(), 'last');
    cleanup.add(() => putBack(displaced), 'last');
    cleanup.add(() => applyCrds(), 'last');
    cleanup.add(() => namespacesGone(), 'last');
    cleanup.add(() => bash('helm uninstall sandbox-remediator -n sandbox-remediator-system --wait || true'));
    // A cluster as a user has it before the install: none of what the README creates. Other tests' namespaces and
    // config/ objects of the same names go, and come back after.
    displaced = await displaceClusterObjects(['-n', NAMESPACES[0]!]);
    for (const namespace of NAMESPACES)
      await kubectl([
        'delete',
        'namespace',
        namespace,
        '--ignore-not-found',
        '--wait=true',
        '--timeout=120s',
      ]);
    // No CRDs either, nor so any SandboxHealth: helm install creates them from the chart's crds/.
    const crds = join(REPO_ROOT, 'crds');
    await kubectl(['delete', '-f', crds, '--ignore-not-found', '--wait=true', '--timeout=60s']);
  });
  after(async function () {
    this.timeout(300_000);
    await operator?.stop();
    await kubectl(['delete', 'sandboxpolicy', 'first', '--ignore-not-found']);
    await cleanup.run();
    rmSync(work, { recursive: true, force: true });
  });

  it('marks three blocks: the install, the first policy, the uninstall', () => {
    expect(blocks).to.have.length(3);
    expect(blocks[0]).to.contain('helm install');
    expect(blocks[1]).to.contain('sandboxpolicy-first.yaml');
    // The operator stopped first, cleanup while the chart (and its agents, which lift IO limits) still runs.
    const uninstall = blocks[2]!;
    const at = ['--replicas=0', 'kubectl wait pod', 'sandbox-remediator cleanup', 'helm uninstall'].map(
      (step) => uninstall.indexOf(step),
    );
    expect(at.every((i) => i >= 0) && at.every((i, n) => n === 0 || i > at[n - 1]!), at.join(' ')).to.equal(
      true,
    );
  });

  it('installs with the chart, and the operator runs with what the chart grants', async () => {
    const installed = await bash(blocks[0]!);
    expect(installed.code, installed.stderr).to.equal(0);
    expect(installed.stdout).to.contain('STATUS: deployed');
    const crd = await kubectl([
      'get',
      'crd',
      'sandboxhealths.sandbox.remediator.io',
      '--show-managed-fields',
      '-o',
      'json',
    ]);
    expect(crd.stdout, "the CRDs from the chart's crds/").to.contain('"manager": "helm"');
    const deployment = await kubectl(['get', 'deployment', '-n', NAMESPACES[0]!, '-o', 'name']);
    expect(deployment.stdout).to.contain('deployment.apps/sandbox-remediator-operator');
    operator = await startAsServiceAccount(work, 'readme');
  });

  it('applies the first policy in dry run, and shows it and the nodes it selects', async () => {
    // The policy valid and selecting nodes, then a SandboxHealth listed under kubectl's header.
    const shown = await eventually(
      'the policy valid, and a SandboxHealth per selected node',
      async () => {
        const result = await bash(blocks[1]!);
        expect(result.code, result.stderr).to.equal(0);
        const headers = result.stdout.match(/^NAME\s/gm) ?? [];
        return /^first\s+True\s+[1-9]/m.test(result.stdout) && headers.length === 2 ? result : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 2000 },
    );
    expect(shown.stdout).to.match(/^first\s+True/m);
    const spec = await kubectl(['get', 'sandboxpolicy', 'first', '-o', 'jsonpath={.spec.safety.dryRun}']);
    expect(spec.stdout).to.equal('true');
  });

  it('uninstalls: the release, what the operator did (nothing, in dry run), the CRDs and the namespace', async () => {
    await operator?.stop(); // as the scale to 0 stops it
    operator = undefined;
    const removed = await bash(blocks[2]!);
    expect(removed.code, removed.stderr).to.equal(0);
    expect((await kubectl(['get', 'crd', 'sandboxpolicies.sandbox.remediator.io'])).code).to.not.equal(0);
    await namespacesGone();
    expect((await bash('helm list -A -q')).stdout).to.not.contain('sandbox-remediator');
  });
});
