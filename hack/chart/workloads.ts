// The operator's Deployment and the agent's DaemonSet: the only objects with values of their own. Each value the
// chart offers is found in config/'s object by what it is (the container by name, a flag by its name, the cgroup
// mount by the flag that reads it), replaced by a Helm action, and its config/ value returned as the chart's
// default. What the generator expects and does not find is an error, so a change in config/ that moves one of
// them is noticed at `make manifests`, not by a user.
import { isMap, isSeq, type Document, type YAMLMap } from 'yaml';
import { Holes, quoted } from './holes.js';

type Path = (string | number)[];
export type Defaults = Record<string, unknown>;

/** Where the pacing webhook's certificate comes from with cert-manager (config/samples/cert-manager). */
export interface WebhookWiring {
  port: number;
  service: string;
  secretName: string;
}

const POD: Path = ['spec', 'template', 'spec'];
const CERT_DIR = '/var/run/webhook-certs';
const CERT_MANAGER = '(eq .Values.webhook.certificates "certManager")';

interface PodSpec {
  containers: {
    name: string;
    image: string;
    args?: string[];
    volumeMounts?: { name: string; mountPath: string }[];
  }[];
  volumes?: { name: string; hostPath?: { path: string } }[];
  tolerations?: unknown[];
  nodeSelector?: Record<string, string>;
}

class Workload {
  readonly pod: PodSpec;
  readonly container: Path;
  readonly index: number;

  constructor(
    readonly doc: Document,
    readonly holes: Holes,
    containerName: string,
  ) {
    this.pod = doc.getIn(POD) ? ((doc.getIn(POD) as YAMLMap).toJSON() as PodSpec) : { containers: [] };
    this.index = this.pod.containers.findIndex((c) => c.name === containerName);
    if (this.index < 0) throw new Error(`no container named ${containerName}`);
    this.container = [...POD, 'containers', this.index];
  }

  get spec() {
    const container = this.pod.containers[this.index];
    if (!container) throw new Error(`no container ${this.index}`);
    return container;
  }

  /** `key: <toYaml of a value>`, the value's default being config/'s. */
  block(path: Path, value: string): void {
    this.doc.setIn(
      path,
      this.holes.inline((indent) => `{{- toYaml ${value} | nindent ${indent + 2} }}`),
    );
  }

  /** `key:` and the value only when it is set (config/ has no such key). */
  optional(at: Path, key: string, value: string): void {
    this.map(at).set(
      this.holes.line((indent) => [
        `{{- with ${value} }}`,
        `${key}:`,
        `  {{- toYaml . | nindent ${indent + 2} }}`,
        '{{- end }}',
      ]),
      null,
    );
  }

  /** Items added to a list under a condition; the list is made when config/ has none. */
  append(at: Path, key: string, condition: string, items: string[]): void {
    const list = this.doc.getIn([...at, key], true);
    if (isSeq(list)) {
      list.flow = false;
      list.add(this.holes.line([`{{- if ${condition} }}`, ...items.map((i) => `- ${i}`), '{{- end }}']));
      return;
    }
    this.map(at).set(
      this.holes.line([`{{- if ${condition} }}`, `${key}:`, ...items.map((i) => `  - ${i}`), '{{- end }}']),
      null,
    );
  }

  /**
   * Where and how its pods run, as production installs set it: tolerations, node selector and priority class
   * (config/'s as the defaults when it has them), affinity, topology spread, the pods' own labels and annotations,
   * and extra environment for the container.
   */
  placement(values: string, defaults: Defaults): void {
    const name = values.replace('.Values.', '');
    for (const key of ['tolerations', 'nodeSelector'] as const) {
      if (this.pod[key] === undefined) this.optional(POD, key, `${values}.${key}`);
      else {
        this.block([...POD, key], `${values}.${key}`);
        defaults[`${name}.${key}`] = this.pod[key];
      }
    }
    for (const key of ['affinity', 'topologySpreadConstraints']) this.optional(POD, key, `${values}.${key}`);
    const priority = (this.doc.getIn([...POD, 'priorityClassName']) as string | undefined) ?? '';
    this.map(POD).delete('priorityClassName');
    this.map(POD).set(
      this.holes.line([
        `{{- with ${values}.priorityClassName }}`,
        'priorityClassName: {{ . }}',
        '{{- end }}',
      ]),
      null,
    );
    defaults[`${name}.priorityClassName`] = priority;
    const meta: Path = ['spec', 'template', 'metadata'];
    this.map(meta).set(
      this.holes.line((indent) => [
        `{{- with ${values}.podAnnotations }}`,
        'annotations:',
        `  {{- toYaml . | nindent ${indent + 2} }}`,
        '{{- end }}',
      ]),
      null,
    );
    const labels = this.doc.getIn([...meta, 'labels'], true);
    if (!isMap(labels)) throw new Error(`${name}'s pod template has no labels`);
    labels.flow = false;
    labels.set(
      this.holes.line((indent) => [
        `{{- with ${values}.podLabels }}`,
        `{{- toYaml . | nindent ${indent} }}`,
        '{{- end }}',
      ]),
      null,
    );
    const env = this.doc.getIn([...this.container, 'env'], true);
    if (!isSeq(env)) throw new Error(`${name}'s container has no env`);
    env.flow = false;
    env.add(
      this.holes.line((indent) => [
        `{{- with ${values}.extraEnv }}`,
        `{{- toYaml . | nindent ${indent} }}`,
        '{{- end }}',
      ]),
    );
    this.optional(POD, 'imagePullSecrets', '.Values.imagePullSecrets');
  }

  image(defaults: Defaults): void {
    const [repository, tag, ...rest] = this.spec.image.split(':');
    if (!repository || !tag || rest.length > 0) throw new Error(`image ${this.spec.image} is not NAME:TAG`);
    this.doc.setIn(
      [...this.container, 'image'],
      this.holes.inline('{{ include "sandbox-remediator.image" . }}'),
    );
    this.map(this.container).set(
      this.holes.line(['{{- with .Values.image.pullPolicy }}', 'imagePullPolicy: {{ . }}', '{{- end }}']),
      null,
    );
    const previous = defaults['image.repository'];
    if (
      previous !== undefined &&
      `${previous as string}:${defaults['image.tag'] as string}` !== this.spec.image
    )
      throw new Error(`the operator and the agent name different images (${this.spec.image})`);
    defaults['image.repository'] = repository;
    defaults['image.tag'] = tag;
  }

  /**
   * The container's args: config/'s in order, those a value controls replaced (a flag maps to the lines that
   * replace it), then `after`, then the extra args.
   */
  args(replace: Record<string, string[]>, after: string[], extra: string): void {
    const args = this.spec.args ?? [];
    const missing = Object.keys(replace).filter((flag) => !args.some((a) => flagOf(a) === flag));
    if (missing.length > 0)
      throw new Error(`container ${this.spec.name} has no ${missing.join(', ')} argument`);
    this.map(this.container).set(
      'args',
      this.holes.line((indent) => [
        'args:',
        ...args.flatMap((a) => replace[flagOf(a)]?.map((l) => `  ${l}`) ?? [`  - ${quoted(a)}`]),
        ...after.map((l) => `  ${l}`),
        `  {{- with ${extra} }}`,
        `  {{- toYaml . | nindent ${indent + 2} }}`,
        '  {{- end }}',
      ]),
    );
  }

  private map(path: Path): YAMLMap {
    const node = this.doc.getIn(path, true);
    if (!isMap(node)) throw new Error(`${path.join('.')} is not a map`);
    node.flow = false;
    return node;
  }
}

const flagOf = (arg: string) => arg.split('=')[0] ?? arg;

/** The operator's Deployment: replicas, image, leader election, resources, placement, the webhook's wiring. */
export function templateOperator(doc: Document, holes: Holes, webhook: WebhookWiring): Defaults {
  const defaults: Defaults = {};
  const w = new Workload(doc, holes, 'operator');
  defaults['operator.replicas'] = doc.getIn(['spec', 'replicas']) ?? 1;
  doc.setIn(['spec', 'replicas'], holes.inline('{{ .Values.operator.replicas }}'));
  w.image(defaults);
  const url = `https://${webhook.service}.{{ .Release.Namespace }}.svc:${webhook.port}/mutate-pods`;
  w.args(
    {
      '--leader-elect': [
        '{{- if .Values.operator.leaderElection.enabled }}',
        '- --leader-elect',
        '{{- end }}',
      ],
    },
    [
      '{{- if .Values.webhook.enabled }}',
      `- --webhook-bind-address=:${webhook.port}`,
      `{{- if ${CERT_MANAGER} }}`,
      `- --webhook-cert-dir=${CERT_DIR}`,
      `- --webhook-url=${url}`,
      '{{- else }}',
      // Each replica registers its own address, so the apiserver asks the leader (ADR 0009).
      `- --webhook-url=https://$(POD_IP):${webhook.port}/mutate-pods`,
      '{{- end }}',
      '{{- end }}',
    ],
    '.Values.operator.extraArgs',
  );
  defaults['operator.leaderElection.enabled'] = true;
  w.append(w.container, 'ports', '.Values.webhook.enabled', [
    `{ name: webhook, containerPort: ${webhook.port} }`,
  ]);
  const withCertManager = `and .Values.webhook.enabled ${CERT_MANAGER}`;
  w.append(w.container, 'volumeMounts', withCertManager, [
    `{ name: webhook-certs, mountPath: ${CERT_DIR}, readOnly: true }`,
  ]);
  w.append(POD, 'volumes', withCertManager, [
    `{ name: webhook-certs, secret: { secretName: ${webhook.secretName} } }`,
  ]);
  defaults['operator.resources'] = w.spec['resources' as keyof typeof w.spec];
  w.block([...w.container, 'resources'], '.Values.operator.resources');
  w.placement('.Values.operator', defaults);
  return defaults;
}

/** The agent's DaemonSet: image, resources, placement, and where the host's cgroup tree is. */
export function templateAgent(doc: Document, holes: Holes): Defaults {
  const defaults: Defaults = {};
  const w = new Workload(doc, holes, 'agent');
  w.image(defaults);
  // --cgroup-root names the mount of the host's cgroup tree: the value is the host's path, mounted under /host.
  const flag = (w.spec.args ?? []).find((a) => a.startsWith('--cgroup-root='));
  const mountPath = flag?.slice('--cgroup-root='.length);
  const mountIndex = (w.spec.volumeMounts ?? []).findIndex((m) => m.mountPath === mountPath);
  const mount = w.spec.volumeMounts?.[mountIndex];
  const volumeIndex = (w.pod.volumes ?? []).findIndex((v) => v.name === mount?.name);
  const hostPath = w.pod.volumes?.[volumeIndex]?.hostPath?.path;
  if (!mount || !hostPath || mountPath !== `/host${hostPath}`)
    throw new Error(
      `the agent's --cgroup-root (${mountPath}) is not the mount of a hostPath volume under /host: teach hack/chart/workloads.ts`,
    );
  const root = '{{ .Values.agent.cgroupRoot }}';
  // limitIo's writes (off, as in config/): the flag, the cgroup tree mounted writable, and root, which owns its files.
  const allow = '.Values.agent.allowIoLimits';
  w.args(
    { '--cgroup-root': [`- --cgroup-root=/host${root}`] },
    [`{{- if ${allow} }}`, '- --allow-io-limits', '{{- end }}'],
    '.Values.agent.extraArgs',
  );
  defaults['agent.allowIoLimits'] = false;
  doc.setIn([...w.container, 'volumeMounts', mountIndex, 'mountPath'], holes.inline(`/host${root}`));
  doc.setIn([...w.container, 'volumeMounts', mountIndex, 'readOnly'], holes.inline(`{{ not ${allow} }}`));
  const user = doc.getIn([...POD, 'securityContext', 'runAsUser']) as number | undefined;
  if (user === undefined || doc.getIn([...POD, 'securityContext', 'runAsNonRoot']) !== true)
    throw new Error("the agent's pod runs as no named non-root user: teach hack/chart/workloads.ts");
  doc.setIn([...POD, 'securityContext', 'runAsNonRoot'], holes.inline(`{{ not ${allow} }}`));
  doc.setIn(
    [...POD, 'securityContext', 'runAsUser'],
    holes.inline(`{{ if ${allow} }}0{{ else }}${user}{{ end }}`),
  );
  doc.setIn([...POD, 'volumes', volumeIndex, 'hostPath', 'path'], holes.inline(root));
  defaults['agent.cgroupRoot'] = hostPath;
  defaults['agent.resources'] = w.spec['resources' as keyof typeof w.spec];
  w.block([...w.container, 'resources'], '.Values.agent.resources');
  w.placement('.Values.agent', defaults);
  return defaults;
}
