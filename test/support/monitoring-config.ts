// What the monitoring tests read and run: config/prometheus as kustomize builds it, the PromQL inside it, the
// names a /metrics page declares, promtool, and the Prometheus Operator's CRDs from the Go module cache.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { kubectl, type CommandResult } from './cluster.js';
import { REPO_ROOT } from './manifests.js';

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: unknown;
  data?: Record<string, string>;
}

export interface PromRule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
export interface RuleGroup {
  name: string;
  rules: PromRule[];
}

/** `kubectl kustomize` of a folder of the repository, as objects. */
export async function kustomize(folder: string): Promise<KubeObject[]> {
  const built = await kubectl(['kustomize', join(REPO_ROOT, folder)]);
  if (built.code !== 0) throw new Error(`kubectl kustomize ${folder} failed: ${built.stderr}`);
  return parseAllDocuments(built.stdout).map((doc) => doc.toJS() as KubeObject);
}

export function findObject(objects: KubeObject[], kind: string, name?: string): KubeObject {
  const found = objects.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  if (!found) throw new Error(`no ${kind}${name ? ` ${name}` : ''} among ${objects.length} objects`);
  return found;
}

/** A PrometheusRule's spec.groups, as a plain rule file would hold them. */
export function ruleGroupsOf(rule: KubeObject): RuleGroup[] {
  return (rule.spec as { groups: RuleGroup[] }).groups;
}

/** Every PromQL expression in a Grafana dashboard: panel targets (rows nest panels) and query variables. */
export function dashboardExpressions(dashboard: unknown): string[] {
  const found: string[] = [];
  const visit = (node: unknown, key: string | undefined): void => {
    if (Array.isArray(node)) {
      for (const item of node) visit(item, key);
    } else if (node !== null && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) visit(v, k);
    } else if (typeof node === 'string' && (key === 'expr' || key === 'query' || key === 'definition')) {
      found.push(node);
    }
  };
  const templating = (dashboard as { templating?: { list?: { type?: string }[] } }).templating?.list ?? [];
  visit((dashboard as { panels?: unknown }).panels, undefined);
  // A datasource variable's query names a plugin type ("prometheus"), not PromQL.
  visit(
    templating.filter((v) => v.type === 'query'),
    undefined,
  );
  return found;
}

const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'offset',
  'bool',
  'inf',
  'nan',
]);

/**
 * The metric names a PromQL expression (or a Grafana query using one) selects. Strings, label matchers, ranges,
 * grouping label lists and Grafana variables go first, so that what is left are functions (followed by a
 * parenthesis), keywords, numbers and metric names.
 */
export function metricNamesIn(expr: string): Set<string> {
  const names = new Set<string>();
  for (const match of expr.matchAll(/__name__\s*=\s*"([a-zA-Z_:][\w:]*)"/g)) names.add(match[1]!);
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ')
    .replace(/#[^\n]*/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    // Grafana's label_values(metric, label) and label_values(label): the label is no metric.
    .replace(/\blabel_values\s*\(\s*([a-zA-Z_:][\w:]*)\s*,\s*\w+\s*\)/g, ' $1 ')
    .replace(/\blabel_values\s*\(\s*\w+\s*\)/g, ' ')
    .replace(/\$\{?\w+\}?/g, ' ');
  // The look-behind keeps the exponent of 1e3, the x of 0x1f and the unit of 5m out.
  for (const match of bare.matchAll(/(?<![\w:.])([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    const [, name, call] = match;
    if (name && !call && !KEYWORDS.has(name.toLowerCase())) names.add(name);
  }
  return names;
}

/**
 * The metric names a /metrics page declares (`# TYPE`, so a labelled metric with no sample yet counts) or samples,
 * with the series names a histogram or summary exposes.
 */
export function exportedMetricNames(exposition: string): Set<string> {
  const names = new Set<string>();
  for (const line of exposition.split('\n')) {
    const type = /^# TYPE ([a-zA-Z_:][\w:]*) (\w+)/.exec(line);
    if (type) {
      const [, name, kind] = type as unknown as [string, string, string];
      names.add(name);
      const suffixes = { histogram: ['_bucket', '_sum', '_count'], summary: ['_sum', '_count'] }[kind] ?? [];
      for (const suffix of suffixes) names.add(name + suffix);
      continue;
    }
    const sample = /^([a-zA-Z_:][\w:]*)[{ ]/.exec(line);
    if (sample?.[1]) names.add(sample[1]);
  }
  return names;
}

function run(command: string, args: string[], cwd?: string): Promise<CommandResult> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr: stderr || (err && code === -1 ? err.message : '') });
    });
  });
}

/** promtool (Debian's prometheus package, `make tools`); never throws on a non-zero exit. */
export function promtool(args: string[], cwd?: string): Promise<CommandResult> {
  return run('promtool', args, cwd);
}

export async function scratchDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

/** The release whose CRDs the manifests are checked against (ServiceMonitor and PrometheusRule are v1 since 0.x). */
export const PROMETHEUS_OPERATOR_MODULE = 'github.com/prometheus-operator/prometheus-operator@v0.85.0';

/**
 * The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, from its Go module (the proxy serves it; Go is
 * required anyway: make tools builds the control plane with it). Throws with the reason when they cannot be had.
 */
export async function prometheusOperatorCrds(): Promise<string[]> {
  const download = await run('go', ['mod', 'download', '-json', PROMETHEUS_OPERATOR_MODULE], tmpdir());
  if (download.code !== 0)
    throw new Error(
      `go mod download ${PROMETHEUS_OPERATOR_MODULE} failed: ${download.stderr || download.stdout}`,
    );
  const dir = (JSON.parse(download.stdout) as { Dir?: string }).Dir;
  if (!dir) throw new Error(`go mod download gave no module directory: ${download.stdout}`);
  const files = ['servicemonitors', 'prometheusrules'].map((plural) =>
    join(dir, 'example', 'prometheus-operator-crd', `monitoring.coreos.com_${plural}.yaml`),
  );
  const absent = files.filter((f) => !existsSync(f));
  if (absent.length > 0) throw new Error(`not in the module: ${absent.join(', ')}`);
  return files;
}
