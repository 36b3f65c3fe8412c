import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { hack, kubectl } from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';

const pinned = /KUBERNETES_VERSION=(\S+)/.exec(
  readFileSync(join(REPO_ROOT, 'hack/cluster/versions.env'), 'utf8'),
)?.[1];

describe('hack/cluster/up.sh', function () {
  it('reuses the running cluster on a second run, and keeps its nodes Ready', async function () {
    this.timeout(120_000);
    const again = await hack('up.sh');
    expect(again.code, again.stderr).to.equal(0);
    expect(again.stderr).to.contain('reusing the running cluster');
    const nodes = await kubectl(['get', 'nodes', '-l', 'type=kwok', '-o', 'name']);
    for (const name of ['kwok-node-0', 'kwok-node-1', 'kwok-node-2'])
      expect(nodes.stdout).to.contain(`node/${name}`);
    const version = await kubectl(['version', '-o', 'json']);
    expect(
      (JSON.parse(version.stdout) as { serverVersion: { gitVersion: string } }).serverVersion.gitVersion,
    ).to.equal(`v${pinned}`);
  });
});
