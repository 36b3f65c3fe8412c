// `diagnose` against an apiserver of our own on 127.0.0.1 (plain HTTP, which client-node speaks when told to skip TLS
// verification): what it reads,
// that it only reads, and the one line and exit status of each way it can fail. The real cluster is in
// test/integration/diagnose.test.ts.
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runDiagnose, type DiagnoseFlags } from '../../../src/cli/diagnose.js';
import type { NodeDiagnosis } from '../../../src/diagnose/schema.js';
import { remediatingStatus, STAMPS } from '../../support/diagnosis.js';

type Route = (url: URL) => { status: number; body: unknown } | undefined;

const list = (items: unknown[]) => ({ kind: 'List', apiVersion: 'v1', metadata: {}, items });
const notFound = { status: 404, body: { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 } };

const N1 = {
  metadata: { name: 'n1', uid: 'n1', annotations: { ...STAMPS, 'example.com/other': 'x' } },
  spec: { unschedulable: true },
  status: { nodeInfo: { containerRuntimeVersion: 'containerd://1.6.0' } },
};
const P1 = { metadata: { name: 'p1', uid: 'p1', generation: 1 }, spec: {} };

/** The objects of a cluster with n1 under remediation, served as the apiserver would. */
const cluster: Route = (url) => {
  const path = url.pathname;
  if (path === '/apis/sandbox.remediator.io/v1alpha1/sandboxhealths') {
    const selected = url.searchParams.get('fieldSelector');
    const health = {
      metadata: { name: 'n1', uid: 'h1' },
      spec: { nodeName: 'n1' },
      status: remediatingStatus(),
    };
    return { status: 200, body: list(selected && selected !== 'metadata.name=n1' ? [] : [health]) };
  }
  if (path === '/api/v1/nodes/n1') return { status: 200, body: N1 };
  if (path === '/api/v1/nodes') return { status: 200, body: list([N1]) };
  if (path.startsWith('/api/v1/nodes/')) return notFound;
  if (path === '/apis/sandbox.remediator.io/v1alpha1/sandboxpolicies/p1') return { status: 200, body: P1 };
  if (path === '/apis/sandbox.remediator.io/v1alpha1/sandboxpolicies')
    return { status: 200, body: list([P1]) };
  if (path === '/api/v1/namespaces/shop/events' || path === '/api/v1/namespaces/default/events')
    return { status: 200, body: list([]) };
  if (['/apis/apps/v1/deployments', '/apis/apps/v1/statefulsets', '/apis/apps/v1/daemonsets'].includes(path))
    return { status: 200, body: list([]) };
  if (path === '/api/v1/pods') return { status: 200, body: list([]) };
  return undefined;
};

/** A fake apiserver: `route` answers, else 404; every request is kept. */
async function apiserver(route: Route): Promise<{ server: Server; url: string; requests: string[] }> {
  const requests: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push(`${req.method ?? '?'} ${url.pathname}${url.search}`);
    const answer = route(url) ?? notFound;
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(answer.body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

describe('sandbox-remediator diagnose (against a fake apiserver)', () => {
  let dir = '';
  const servers: Server[] = [];
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'diagnose-'));
  });
  after(() => {
    for (const s of servers) s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function kubeconfigFor(server: string, contexts = ['c']): string {
    const file = join(dir, `kubeconfig-${Math.random().toString(16).slice(2)}`);
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': contexts[0],
        contexts: contexts.map((name) => ({ name, context: { cluster: 'c', user: 'u' } })),
        clusters: [{ name: 'c', cluster: { server, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user: { token: 't' } }],
      }),
    );
    return file;
  }

  async function run(node: string | undefined, flags: Partial<DiagnoseFlags>) {
    let stdout = '';
    let stderr = '';
    const code = await runDiagnose(
      node,
      { output: 'text', ...flags },
      { write: (t: string) => (stdout += t) },
      { write: (t: string) => (stderr += t) },
    );
    return { code, stdout, stderr };
  }

  it('diagnoses a node with GETs and LISTs only, and prints JSON with -o json', async () => {
    const api = await apiserver(cluster);
    servers.push(api.server);
    const result = await run('n1', { kubeconfig: kubeconfigFor(api.url), output: 'json' });
    expect(result.stderr).to.equal('');
    expect(result.code).to.equal(0);
    const d = JSON.parse(result.stdout) as NodeDiagnosis;
    expect(d.summary).to.match(/^n1: Remediating; 2 pod\(s\) stuck/);
    expect(d.done.stamps, 'only our annotations').to.not.have.property('example.com/other');
    expect(d.done.cordonedByOperator).to.equal(true);
    expect(d.unavailable).to.deep.equal([]);
    expect(
      api.requests.every((r) => r.startsWith('GET ')),
      api.requests.join('\n'),
    ).to.equal(true);
    expect(api.requests).to.include.members([
      'GET /apis/sandbox.remediator.io/v1alpha1/sandboxhealths?fieldSelector=metadata.name%3Dn1',
      'GET /api/v1/nodes/n1',
      'GET /apis/sandbox.remediator.io/v1alpha1/sandboxpolicies/p1',
      'GET /api/v1/namespaces/shop/events?fieldSelector=involvedObject.name%3Dweb-1%2Creason%3DFailedCreatePodSandBox',
    ]);
  });

  it('exits 1 with one line for a node that has neither a Node nor a SandboxHealth', async () => {
    const api = await apiserver(cluster);
    servers.push(api.server);
    const result = await run('n9', { kubeconfig: kubeconfigFor(api.url) });
    expect(result.code).to.equal(1);
    expect(result.stdout).to.equal('');
    expect(result.stderr).to.equal(
      'diagnose: no node "n9" and no SandboxHealth of that name: check the name (kubectl get nodes), or the cluster (--kubeconfig, --context)\n',
    );
  });

  it('goes on without a read that fails, and names it', async () => {
    const api = await apiserver((url) =>
      url.pathname === '/apis/apps/v1/deployments'
        ? {
            status: 403,
            body: {
              kind: 'Status',
              reason: 'Forbidden',
              message: 'deployments.apps is forbidden',
              code: 403,
            },
          }
        : cluster(url),
    );
    servers.push(api.server);
    const result = await run('n1', { kubeconfig: kubeconfigFor(api.url) });
    expect(result.code).to.equal(0);
    expect(result.stdout).to.contain(
      'Not read\n  list deployments: deployments.apps is forbidden (HTTP 403 Forbidden)',
    );
  });

  const failures: { name: string; route: Route; line: RegExp }[] = [
    {
      name: 'the CRDs are not installed',
      route: (url) => (url.pathname.includes('sandboxhealths') ? notFound : cluster(url)),
      line: /^diagnose: http:\/\/127\.0\.0\.1:\d+ does not serve sandboxhealths\.sandbox\.remediator\.io: the operator is not installed here \(kubectl apply -f crds\/\), or this is the wrong cluster \(--kubeconfig, --context\)\n$/,
    },
    {
      name: 'the credentials are refused',
      route: () => ({ status: 401, body: { kind: 'Status', reason: 'Unauthorized', code: 401 } }),
      line: /^diagnose: http:\/\/127\.0\.0\.1:\d+ does not accept the credentials of kubeconfig user "u" \(HTTP 401 Unauthorized\): fix them, or pass --kubeconfig=<a kubeconfig this cluster accepts>\n$/,
    },
    {
      name: 'RBAC forbids a read it needs',
      route: (url) =>
        url.pathname.startsWith('/api/v1/nodes')
          ? {
              status: 403,
              body: { kind: 'Status', reason: 'Forbidden', message: 'nodes is forbidden', code: 403 },
            }
          : cluster(url),
      line: /^diagnose: not allowed to get node n1 on http:\/\/127\.0\.0\.1:\d+ \(HTTP 403 Forbidden\): diagnose needs get and list on nodes, pods, events, sandboxhealths and sandboxpolicies \(and list on deployments, statefulsets, daemonsets and argoproj\.io rollouts\)\n$/,
    },
  ];
  for (const { name, route, line } of failures) {
    it(`exits 2 with one line when ${name}`, async () => {
      const api = await apiserver(route);
      servers.push(api.server);
      const result = await run('n1', { kubeconfig: kubeconfigFor(api.url) });
      expect(result.code).to.equal(2);
      expect(result.stdout).to.equal('');
      expect(result.stderr).to.match(line);
    });
  }

  it('exits 2 with one line when the apiserver cannot be reached', async () => {
    const api = await apiserver(cluster);
    await new Promise((resolve) => api.server.close(resolve)); // the port is free now: connection refused
    const result = await run(undefined, { kubeconfig: kubeconfigFor(api.url) });
    expect(result.code).to.equal(2);
    expect(result.stderr).to.match(
      /^diagnose: cannot reach the apiserver at http:\/\/127\.0\.0\.1:\d+: connection refused; start it, or pass --kubeconfig=<a kubeconfig whose server is up>\n$/,
    );
  });

  it('exits 2 with one line for a kubeconfig it cannot use, an unknown --context, or no node name', async () => {
    const missing = await run('n1', { kubeconfig: join(dir, 'nope') });
    expect([missing.code, missing.stderr]).to.deep.equal([
      2,
      `diagnose: the kubeconfig ${join(dir, 'nope')} does not exist; pass --kubeconfig=<path>\n`,
    ]);
    const file = kubeconfigFor('http://127.0.0.1:1', ['c', 'other']);
    const context = await run('n1', { kubeconfig: file, context: 'prod' });
    expect([context.code, context.stderr]).to.deep.equal([
      2,
      `diagnose: the kubeconfig ${file} defines no context "prod" (kubectl config get-contexts lists those it has); pass --kubeconfig=<path>\n`,
    ]);
    const name = await run('Not_A_Node', { kubeconfig: file });
    expect([name.code, name.stderr]).to.deep.equal([
      2,
      'diagnose: "Not_A_Node" is not a node name (kubectl get nodes lists them)\n',
    ]);
  });

  it('uses the context --context names', async () => {
    const api = await apiserver(cluster);
    servers.push(api.server);
    const file = join(dir, 'two-clusters');
    writeFileSync(
      file,
      JSON.stringify({
        'current-context': 'down',
        contexts: [
          { name: 'down', context: { cluster: 'down', user: 'u' } },
          { name: 'up', context: { cluster: 'up', user: 'u' } },
        ],
        clusters: [
          { name: 'down', cluster: { server: 'http://127.0.0.1:1', 'insecure-skip-tls-verify': true } },
          { name: 'up', cluster: { server: api.url, 'insecure-skip-tls-verify': true } },
        ],
        users: [{ name: 'u', user: { token: 't' } }],
      }),
    );
    const result = await run(undefined, { kubeconfig: file, context: 'up' });
    expect(result.stderr).to.equal('');
    expect(result.code).to.equal(0);
    expect(result.stdout.split('\n')[0]).to.equal('1 of 1 watched node(s) need attention');
  });
});
