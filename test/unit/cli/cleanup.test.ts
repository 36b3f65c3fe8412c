// `cleanup` against an apiserver of our own on 127.0.0.1: it refuses (exit 2, nothing but the Lease read) while the
// leader Lease is fresh or cannot be read, runs with --force or once the Lease is released, a dry run of a stamped node
// writes nothing, and a list that fails makes the exit status 1. The real cluster is in test/integration/cleanup.test.ts.
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCleanupCommand, type CleanupFlags } from '../../../src/cli/cleanup.js';

const NOW = new Date('2026-12-01T12:00:00.000Z');
const LEASE_PATH = '/apis/coordination.k8s.io/v1/namespaces/ops/leases/op';
const list = (items: unknown[]) => ({ kind: 'List', apiVersion: 'v1', metadata: {}, items });
const status = (code: number, reason: string) => ({
  status: code,
  body: { kind: 'Status', status: 'Failure', reason, code },
});
const leader = (holder: string, renewedSecondsAgo: number) => ({
  status: 200,
  body: {
    metadata: { name: 'op', namespace: 'ops', resourceVersion: '1' },
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: 15,
      renewTime: new Date(NOW.getTime() - renewedSecondsAgo * 1000).toISOString(),
    },
  },
});
const STAMPED = {
  metadata: {
    name: 'n1',
    uid: 'n1',
    resourceVersion: '5',
    annotations: { 'sandbox.remediator.io/remediated-by': 'p', 'sandbox.remediator.io/cordoned': 'true' },
  },
  spec: { unschedulable: true },
};

type Answer = { status: number; body: unknown };

/** Every list answers empty unless `extra` answers first; the Lease as `lease` says. */
async function apiserver(lease: Answer, extra: (path: string) => Answer | undefined = () => undefined) {
  const requests: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push(`${req.method ?? '?'} ${url.pathname}`);
    const answer =
      url.pathname === LEASE_PATH
        ? lease
        : (extra(url.pathname) ??
          (req.method === 'GET' ? { status: 200, body: list([]) } : status(404, 'NotFound')));
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(answer.body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

describe('sandbox-remediator cleanup (against a fake apiserver)', () => {
  let dir = '';
  const servers: Server[] = [];
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'cleanup-'));
  });
  after(() => {
    for (const s of servers) s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function run(api: { server: Server; url: string }, flags: Partial<CleanupFlags> = {}) {
    servers.push(api.server);
    const kubeconfig = join(dir, `kubeconfig-${servers.length}`);
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': 'c',
        contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
        clusters: [{ name: 'c', cluster: { server: api.url, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user: { token: 't' } }],
      }),
    );
    let stdout = '';
    let stderr = '';
    const code = await runCleanupCommand(
      {
        kubeconfig,
        dryRun: false,
        force: false,
        keepHealth: false,
        operatorNamespace: 'ops',
        leaderElectionId: 'op',
        ...flags,
      },
      { write: (t: string) => (stdout += t) },
      { write: (t: string) => (stderr += t) },
      () => NOW,
    );
    return { code, stdout, stderr };
  }

  it('refuses while the leader Lease is fresh, naming it and its holder, having read nothing else', async () => {
    const api = await apiserver(leader('operator-7f9c_1a2b', 3));
    const result = await run(api);
    expect(result.code).to.equal(2);
    expect(result.stdout).to.equal('');
    expect(result.stderr).to.match(
      /^cleanup: the operator's leader Lease ops\/op is held by operator-7f9c_1a2b \(renewed 3 s ago, lease 15 s\)/,
    );
    expect(api.requests).to.deep.equal([`GET ${LEASE_PATH}`]);
  });

  it('refuses when the Lease cannot be read, unless --force', async () => {
    const refused = await run(await apiserver(status(403, 'Forbidden')));
    expect(refused.code).to.equal(2);
    expect(refused.stderr).to.match(
      /^cleanup: could not read the operator's leader Lease ops\/op: .*--force runs it anyway\n$/,
    );
    const forced = await run(await apiserver(status(403, 'Forbidden')), { force: true });
    expect(forced.code).to.equal(0);
    expect(forced.stdout).to.match(/^Could not read the leader Lease ops\/op \(.*\); going on: --force\.\n/);
  });

  it('with no Lease where told, refuses on a fresh one of that name in another namespace, naming it', async () => {
    const fresh = leader('operator-pod-1', 2).body;
    const api = await apiserver(status(404, 'NotFound'), (path) =>
      path === '/apis/coordination.k8s.io/v1/leases'
        ? { status: 200, body: list([{ ...fresh, metadata: { ...fresh.metadata, namespace: 'other' } }]) }
        : undefined,
    );
    const result = await run(api);
    expect(result.code).to.equal(2);
    expect(result.stderr).to.match(
      /^cleanup: no Lease ops\/op, but the operator's leader Lease other\/op is held by operator-pod-1 \(renewed 2 s ago/,
    );
    expect(result.stderr).to.include('Pass --operator-namespace other if that is the one.');
    expect(api.requests, 'nothing but the Leases read').to.deep.equal([
      `GET ${LEASE_PATH}`,
      'GET /apis/coordination.k8s.io/v1/leases',
    ]);
  });

  it('with --force runs although the Lease is fresh, and says so', async () => {
    const result = await run(await apiserver(leader('operator-7f9c_1a2b', 3)), { force: true });
    expect(result.code).to.equal(0);
    expect(result.stdout.split('\n')).to.deep.equal([
      'The leader Lease ops/op is held by operator-7f9c_1a2b; going on anyway: --force.',
      "Found nothing of the operator's to undo.",
      'Changed 0, failed 0, left alone 0.',
      '',
    ]);
  });

  it('a dry run of a stamped node once the Lease is released: says what it would do, and only reads', async () => {
    const api = await apiserver(leader('', 0), (path) =>
      path === '/api/v1/nodes' ? { status: 200, body: list([STAMPED]) } : undefined,
    );
    const result = await run(api, { dryRun: true });
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout.split('\n')).to.deep.equal([
      'No operator leads: the leader Lease ops/op is released.',
      'Dry run: nothing is changed; each line says what cleanup would do.',
      'Would release node/n1: uncordoned, stamps of policy p removed',
      'Would change 1, failed 0, left alone 0.',
      '',
    ]);
    expect(
      api.requests.filter((r) => !r.startsWith('GET ')),
      'nothing but reads',
    ).to.deep.equal([]);
  });

  it('exits 1 when a list fails, naming it, after doing the rest', async () => {
    const api = await apiserver(status(404, 'NotFound'), (path) =>
      path === '/api/v1/nodes' ? status(500, 'InternalError') : undefined,
    );
    const result = await run(api);
    expect(result.code).to.equal(1);
    expect(result.stdout).to.match(
      /^No operator leads: the leader Lease ops\/op is not there \(an operator run without --leader-elect/,
    );
    expect(result.stdout).to.match(/\nFailed to list nodes: .* \(what it holds is not cleaned up\)\n/);
    expect(result.stdout).to.match(
      /\nChanged 0, failed 1, left alone 0\. Run cleanup again once the failures are fixed/,
    );
  });

  it('keeps every lease of ours when the nodes cannot be listed: a stamped node would lose it', async () => {
    const ourLease = {
      metadata: { name: 'node-n1', namespace: 'medik8s-leases', uid: 'l1', resourceVersion: '3' },
      spec: {
        holderIdentity: 'sandbox-remediator-p',
        leaseDurationSeconds: 120,
        renewTime: NOW.toISOString(),
      },
    };
    const api = await apiserver(status(404, 'NotFound'), (path) => {
      if (path === '/api/v1/nodes') return status(500, 'InternalError');
      if (path === '/apis/coordination.k8s.io/v1/namespaces/medik8s-leases/leases')
        return { status: 200, body: list([ourLease]) };
      return undefined;
    });
    const result = await run(api);
    expect(result.code).to.equal(1);
    expect(
      api.requests.filter((r) => r.startsWith('DELETE ')),
      'no lease deleted',
    ).to.deep.equal([]);
    expect(result.stdout).to.include(
      'lease/medik8s-leases/node-n1: ours, kept: the nodes could not be listed, so its node may still carry our fence',
    );
  });

  it('exits 2 with one line for a kubeconfig it cannot read', async () => {
    let stderr = '';
    const code = await runCleanupCommand(
      {
        kubeconfig: join(dir, 'missing'),
        dryRun: false,
        force: false,
        keepHealth: false,
        operatorNamespace: 'ops',
        leaderElectionId: 'op',
      },
      { write: () => undefined },
      { write: (t: string) => (stderr += t) },
    );
    expect(code).to.equal(2);
    expect(stderr).to.match(/^cleanup: .*missing.*; pass --kubeconfig=<path>\n$/);
  });
});
