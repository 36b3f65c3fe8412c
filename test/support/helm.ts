// What the chart's tests run: helm as `make tools` builds it (hack/cluster/build.sh helm), against the local
// cluster, and the third-party CRDs the chart's optional objects need, from the Go modules that ship them.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { establishCrds, KUBECONFIG, kubectl, type CommandResult } from './cluster.js';
import { REPO_ROOT } from './manifests.js';
import { prometheusOperatorCrds, type KubeObject } from './monitoring-config.js';

export const CHART_DIR = join(REPO_ROOT, 'charts', 'sandbox-remediator');

/** The helm that `make tools` built for HELM_VERSION (or $HELM); throws with what to run when it is missing. */
export function helmBinary(): string {
  if (process.env.HELM) return process.env.HELM;
  const versions = readFileSync(join(REPO_ROOT, 'hack', 'cluster', 'versions.env'), 'utf8');
  const version = /^HELM_VERSION=(\S+)$/m.exec(versions)?.[1];
  if (!version) throw new Error('hack/cluster/versions.env has no HELM_VERSION');
  const cache = process.env.SANDBOX_REMEDIATOR_CACHE ?? join(homedir(), '.cache', 'sandbox-remediator');
  const path = join(cache, 'bin', `helm-v${version}`, 'helm');
  if (!existsSync(path)) throw new Error(`${path} is missing: run make tools (hack/cluster/build.sh helm)`);
  return path;
}

/** Runs helm against the local cluster (its own caches in a temporary HOME-less place); never throws on exit. */
export function helm(args: string[]): Promise<CommandResult> {
  const scratch = join(tmpdir(), 'sandbox-remediator-helm');
  const env = {
    ...process.env,
    KUBECONFIG,
    HELM_CACHE_HOME: join(scratch, 'cache'),
    HELM_CONFIG_HOME: join(scratch, 'config'),
    HELM_DATA_HOME: join(scratch, 'data'),
  };
  return new Promise((resolve) => {
    execFile(helmBinary(), args, { env, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr: stderr || (err && code === -1 ? err.message : '') });
    });
  });
}

/** `--set` arguments from a flat map of values. */
export const setValues = (values: Record<string, string | number | boolean>) =>
  Object.entries(values).flatMap(([k, v]) => ['--set', `${k}=${String(v)}`]);

/** `helm template` of the chart, as objects; throws with helm's message when it fails. */
export async function renderChart(args: string[]): Promise<KubeObject[]> {
  const result = await helm(['template', 'sandbox-remediator', CHART_DIR, ...args]);
  if (result.code !== 0) throw new Error(`helm template failed: ${result.stderr}`);
  return objectsOf(result.stdout);
}

export const objectsOf = (yaml: string): KubeObject[] =>
  parseAllDocuments(yaml)
    .map((d) => d.toJS() as KubeObject | null)
    .filter((o): o is KubeObject => o !== null);

/** The release whose Issuer and Certificate CRDs the chart's cert-manager objects are checked against. */
export const CERT_MANAGER_MODULE = 'github.com/cert-manager/cert-manager@v1.21.2';

function run(command: string, args: string[]): Promise<CommandResult> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd: tmpdir(), maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      resolve({ code: err ? -1 : 0, stdout, stderr });
    });
  });
}

/** cert-manager's Issuer and Certificate CRDs, from its Go module (as prometheusOperatorCrds gets the Prometheus Operator's). */
export async function certManagerCrds(): Promise<string[]> {
  const download = await run('go', ['mod', 'download', '-json', CERT_MANAGER_MODULE]);
  const dir = download.code === 0 ? (JSON.parse(download.stdout) as { Dir?: string }).Dir : undefined;
  if (!dir)
    throw new Error(`go mod download ${CERT_MANAGER_MODULE} failed: ${download.stderr || download.stdout}`);
  const files = ['issuers', 'certificates'].map((plural) =>
    join(dir, 'deploy', 'crds', `cert-manager.io_${plural}.yaml`),
  );
  const absent = files.filter((f) => !existsSync(f));
  if (absent.length > 0) throw new Error(`not in the module: ${absent.join(', ')}`);
  return files;
}

/**
 * The ServiceMonitor, PrometheusRule, Issuer and Certificate CRDs applied where missing and Established; returns the
 * names of those it created, for the caller to delete (someone else's are left be).
 */
export async function ensureThirdPartyCrds(): Promise<string[]> {
  const files = [...(await prometheusOperatorCrds()), ...(await certManagerCrds())];
  // monitoring.coreos.com_servicemonitors.yaml defines servicemonitors.monitoring.coreos.com
  const names = files.map((f) => basename(f, '.yaml').split('_').reverse().join('.'));
  const created: string[] = [];
  for (const [i, name] of names.entries()) {
    if ((await kubectl(['get', 'crd', name])).code === 0) continue;
    const applied = await kubectl(['apply', '--server-side', '-f', files[i] ?? '']);
    if (applied.code !== 0) throw new Error(`applying ${name} failed: ${applied.stderr}`);
    created.push(name);
  }
  await establishCrds(names);
  return created;
}

/** What kubectl calls an object's resource: Kind.group, or Kind in the core group. */
export const kubectlResource = (o: KubeObject) =>
  o.apiVersion.includes('/') ? `${o.kind}.${o.apiVersion.split('/')[0]}` : o.kind;

/**
 * The chart's cluster-scoped objects (rendered with `values`) that exist already under config/'s fixed names, as other
 * tests leave them (config/rbac, config/webhook): deleted, so that helm install can own them, and returned for
 * putBack.
 */
export async function displaceClusterObjects(values: string[]): Promise<KubeObject[]> {
  const displaced: KubeObject[] = [];
  for (const o of await renderChart(values)) {
    if (o.metadata.namespace) continue;
    const found = await kubectl(['get', kubectlResource(o), o.metadata.name, '-o', 'json']);
    if (found.code !== 0) continue;
    displaced.push(JSON.parse(found.stdout) as KubeObject);
    await kubectl(['delete', kubectlResource(o), o.metadata.name, '--wait=true']);
  }
  return displaced;
}

/** Creates again what displaceClusterObjects deleted, as it was (less what the apiserver sets). */
export async function putBack(displaced: readonly KubeObject[]): Promise<void> {
  for (const o of displaced) {
    const {
      uid: _u,
      resourceVersion: _r,
      creationTimestamp: _c,
      managedFields: _m,
      ...metadata
    } = o.metadata as KubeObject['metadata'] & Record<string, unknown>;
    const { status: _s, ...rest } = o as KubeObject & { status?: unknown };
    const created = await kubectl(['create', '-f', '-'], JSON.stringify({ ...rest, metadata }));
    if (created.code !== 0 && !created.stderr.includes('AlreadyExists'))
      throw new Error(`putting back ${o.kind}/${o.metadata.name} failed: ${created.stderr}`);
  }
}
