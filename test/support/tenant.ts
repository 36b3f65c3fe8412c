// A tenant of a shared cluster: a user with a Role in one namespace only, acting through `kubectl --as`, as a team
// would with its own credentials. What it may do there is what any team may do in its namespace: run pods and
// workloads and write Events.
import { Cleanup, createNamespace, kubectl, uniqueName, type CommandResult } from './cluster.js';

const ROLE_RULES = [
  {
    apiGroups: [''],
    resources: ['pods', 'events', 'persistentvolumeclaims'],
    verbs: ['create', 'get', 'list', 'watch', 'update', 'patch', 'delete'],
  },
  {
    apiGroups: ['events.k8s.io'],
    resources: ['events'],
    verbs: ['create', 'get', 'list', 'update', 'patch'],
  },
  {
    apiGroups: ['apps'],
    resources: ['deployments', 'statefulsets', 'daemonsets'],
    verbs: ['create', 'get', 'list', 'watch', 'update', 'patch', 'delete'],
  },
];

export class Tenant {
  private constructor(
    readonly user: string,
    readonly namespace: string,
  ) {}

  /** A namespace of its own (deleted by cleanup), and a user bound to a Role there and nowhere else. */
  static async create(cleanup: Cleanup): Promise<Tenant> {
    const namespace = await createNamespace(cleanup, 'tenant');
    const user = uniqueName('tenant');
    const role = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: 'team', namespace },
      rules: ROLE_RULES,
    };
    const binding = {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: 'team', namespace },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'team' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
    };
    const applied = await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ kind: 'List', apiVersion: 'v1', items: [role, binding] }),
    );
    if (applied.code !== 0) throw new Error(`the tenant's Role: ${applied.stderr}`);
    return new Tenant(user, namespace);
  }

  /** kubectl as this tenant, in its namespace. */
  kubectl(args: string[], input?: string): Promise<CommandResult> {
    return kubectl([...args, `--as=${this.user}`, '-n', this.namespace], input);
  }

  /** Creates an object as this tenant; resolves to kubectl's result (not thrown: a refusal is what some tests want). */
  create(object: Record<string, unknown>): Promise<CommandResult> {
    return this.kubectl(['create', '-f', '-', '-o', 'json'], JSON.stringify(object));
  }
}
