// Which policy owns each node: a policy's selector (by default every node but the control plane, never an excluded
// one), the more specific, older, then first-named policy winning; validation once per spec; Ownership made again
// only when a node's view or a policy changed.
import { expect } from 'chai';
import {
  CONTROL_PLANE_LABEL,
  EXCLUDE_LABEL,
  validateSandboxPolicySpec,
  type SandboxPolicySpec,
} from '../../../src/api/v1alpha1/index.js';
import {
  assignmentOf,
  assignNodes,
  comparePolicies,
  isFrozenPolicy,
  Ownership,
  selectsNode,
  validatePolicy,
  validPolicies,
  type PolicyCandidate,
} from '../../../src/controllers/node-assignment.js';
import type { PolicyObject } from '../../../src/ports/cluster.js';
import { secondsAfter, T0 } from '../../support/builders.js';
import { aNode, MemoryCluster } from '../../support/memory-cluster.js';

function specOf(raw: unknown): SandboxPolicySpec {
  const result = validateSandboxPolicySpec(raw);
  if (!result.valid) throw new Error(`invalid spec in the test: ${JSON.stringify(result.problems)}`);
  return result.spec;
}

const INVALID = { detection: { stuckThresholdSeconds: -1 } };
const io = { nodeSelector: { matchLabels: { pool: 'io' } } };
const ioInZoneA = { nodeSelector: { matchLabels: { pool: 'io', zone: 'a' } } };

const candidate = (name: string, raw: unknown, createdAt = T0): PolicyCandidate => ({
  name,
  createdAt,
  spec: specOf(raw),
});

const policyObject = (name: string, spec: unknown, overrides: Partial<PolicyObject> = {}): PolicyObject => ({
  name,
  uid: `uid-${name}`,
  generation: 1,
  createdAt: T0,
  spec,
  ...overrides,
});

describe('selectsNode', () => {
  const cases: { name: string; spec: unknown; labels: Record<string, string>; selects: boolean }[] = [
    { name: 'selects a worker node by default', spec: {}, labels: {}, selects: true },
    {
      name: 'leaves a control-plane node out by default, whatever the label says',
      spec: {},
      labels: { [CONTROL_PLANE_LABEL]: '' },
      selects: false,
    },
    {
      name: 'never selects a node excluded by its label',
      spec: {},
      labels: { [EXCLUDE_LABEL]: 'true' },
      selects: false,
    },
    {
      name: "does not take an exclude label other than 'true' as excluding",
      spec: {},
      labels: { [EXCLUDE_LABEL]: 'false' },
      selects: true,
    },
    { name: 'selects a node its selector matches', spec: io, labels: { pool: 'io' }, selects: true },
    {
      name: 'leaves out a node its selector does not match',
      spec: io,
      labels: { pool: 'web' },
      selects: false,
    },
    {
      name: 'selects a control-plane node its selector names',
      spec: io,
      labels: { pool: 'io', [CONTROL_PLANE_LABEL]: '' },
      selects: true,
    },
    {
      name: 'never selects an excluded node, even one its selector matches',
      spec: io,
      labels: { pool: 'io', [EXCLUDE_LABEL]: 'true' },
      selects: false,
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      expect(selectsNode(specOf(c.spec), { labels: c.labels })).to.equal(c.selects);
    });
});

describe('comparePolicies', () => {
  const cases: { name: string; first: PolicyCandidate; second: PolicyCandidate }[] = [
    {
      name: 'ranks the more specific selector first, though it is younger',
      first: candidate('young', ioInZoneA, secondsAfter(T0, 60)),
      second: candidate('old', io, T0),
    },
    {
      name: 'ranks any selector before none',
      first: candidate('z', io, secondsAfter(T0, 60)),
      second: candidate('a', {}, T0),
    },
    {
      name: 'ranks the older of two equally specific policies first',
      first: candidate('z', io, T0),
      second: candidate('a', { nodeSelector: { matchLabels: { zone: 'a' } } }, secondsAfter(T0, 1)),
    },
    {
      name: 'ranks by name two policies of equal specificity and age',
      first: candidate('a', io, T0),
      second: candidate('b', io, T0),
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      expect(comparePolicies(c.first, c.second)).to.be.below(0);
      expect(comparePolicies(c.second, c.first)).to.be.above(0);
      expect([c.second, c.first].sort(comparePolicies).map((p) => p.name)).to.deep.equal([
        c.first.name,
        c.second.name,
      ]);
    });
});

describe('assignNodes', () => {
  const nodes = [
    aNode('io-a', { pool: 'io', zone: 'a' }),
    aNode('io-b', { pool: 'io', zone: 'b' }),
    aNode('web', { pool: 'web' }),
    aNode('cp', { [CONTROL_PLANE_LABEL]: '' }),
  ];
  const policies = [candidate('everything', {}), candidate('io', io), candidate('io-zone-a', ioInZoneA)];

  it('gives each node to the most specific policy that selects it, and none to a node none selects', () => {
    const { owner } = assignNodes(policies, nodes);
    expect(Object.fromEntries(owner)).to.deep.equal({ 'io-a': 'io-zone-a', 'io-b': 'io', web: 'everything' });
  });

  it('lists, for each policy that lost a node it selects, the node and who owns it', () => {
    const { overlaps } = assignNodes(policies, nodes);
    expect(Object.fromEntries(overlaps)).to.deep.equal({
      everything: [
        { node: 'io-a', ownedBy: 'io-zone-a' },
        { node: 'io-b', ownedBy: 'io' },
      ],
      io: [{ node: 'io-a', ownedBy: 'io-zone-a' }],
    });
  });

  it('assigns the same whatever order the policies come in', () => {
    const forward = assignNodes(policies, nodes);
    const backward = assignNodes([...policies].reverse(), nodes);
    expect(Object.fromEntries(backward.owner)).to.deep.equal(Object.fromEntries(forward.owner));
    expect(Object.fromEntries(backward.overlaps)).to.deep.equal(Object.fromEntries(forward.overlaps));
  });

  it('assigns nothing without policies', () => {
    const { owner, overlaps } = assignNodes([], nodes);
    expect([owner.size, overlaps.size]).to.deep.equal([0, 0]);
  });
});

describe('validatePolicy and validPolicies', () => {
  it('validates a spec once: the same result for the same name and spec, whatever else the object holds', () => {
    const spec = { detection: { stuckThresholdSeconds: 77 } };
    const first = validatePolicy(policyObject('once', spec));
    const again = validatePolicy(
      policyObject('once', structuredClone(spec), { generation: 2, status: { actionCount: 3 } }),
    );
    expect(again).to.equal(first);
  });

  it('validates again for another spec or another name', () => {
    const spec = { detection: { stuckThresholdSeconds: 78 } };
    const first = validatePolicy(policyObject('twice', spec));
    expect(validatePolicy(policyObject('twice', { detection: { stuckThresholdSeconds: 79 } }))).not.to.equal(
      first,
    );
    const namesake = validatePolicy(policyObject('other', spec));
    expect(namesake).not.to.equal(first);
    expect(namesake).to.deep.equal(first);
  });

  it('lists the problems of an invalid spec', () => {
    const result = validatePolicy(policyObject('bad', INVALID));
    expect(result.valid).to.equal(false);
    expect(result.problems.map((p) => p.field)).to.deep.equal(['spec.detection.stuckThresholdSeconds']);
  });

  it('keeps the valid policies with their parsed specs and objects, and leaves the invalid ones out', () => {
    const good = policyObject('good', io, { createdAt: secondsAfter(T0, 5) });
    const valid = validPolicies([good, policyObject('bad', INVALID)]);
    expect(valid.map((p) => p.name)).to.deep.equal(['good']);
    expect(valid[0]?.object).to.equal(good);
    expect(valid[0]?.createdAt).to.equal(good.createdAt);
    expect(valid[0]?.spec.nodeSelector).to.deep.equal(io.nodeSelector);
    expect(valid[0]?.spec.detection.stuckThresholdSeconds, 'the defaults filled in').to.equal(180);
  });
});

describe('assignmentOf', () => {
  it('assigns the nodes of the cache to its valid policies only', () => {
    const cluster = new MemoryCluster()
      .addPolicy('all', {}, T0)
      .addPolicy('io', { ...io, detection: { stuckThresholdSeconds: -1 } }, T0)
      .addNodes(aNode('n1', { pool: 'io' }), aNode('n2'));
    expect(Object.fromEntries(assignmentOf(cluster).owner)).to.deep.equal({ n1: 'all', n2: 'all' });
  });
});

describe('Ownership', () => {
  function world() {
    const cluster = new MemoryCluster()
      .addPolicy('all', {}, T0)
      .addPolicy('io', io, T0)
      .addNodes(aNode('n1', { pool: 'io' }), aNode('n2'), aNode('n3', { pool: 'io' }));
    return { cluster, ownership: new Ownership() };
  }

  it('answers as assignmentOf does', () => {
    const { cluster, ownership } = world();
    expect(Object.fromEntries(ownership.of(cluster).owner)).to.deep.equal(
      Object.fromEntries(assignmentOf(cluster).owner),
    );
  });

  it('keeps its assignment while no node view and no policy changed', () => {
    const { cluster, ownership } = world();
    const first = ownership.of(cluster);
    expect(ownership.of(cluster)).to.equal(first);
  });

  const changes: {
    name: string;
    change: (cluster: MemoryCluster) => void;
    owners: Record<string, string>;
  }[] = [
    {
      name: "assigns again when a node's view is replaced (relabelled)",
      change: (c) => c.addNodes(aNode('n2', { pool: 'io' })),
      owners: { n1: 'io', n2: 'io', n3: 'io' },
    },
    {
      name: 'assigns again when a node comes',
      change: (c) => c.addNodes(aNode('n4')),
      owners: { n1: 'io', n2: 'all', n3: 'io', n4: 'all' },
    },
    {
      name: 'assigns again when a node goes',
      change: (c) => c.nodeMap.delete('n3'),
      owners: { n1: 'io', n2: 'all' },
    },
    {
      name: "assigns again when a policy's spec changes",
      change: (c) => c.addPolicy('io', { nodeSelector: { matchLabels: { pool: 'none' } } }, T0),
      owners: { n1: 'all', n2: 'all', n3: 'all' },
    },
    {
      name: 'assigns again when a policy turns invalid',
      change: (c) => c.addPolicy('io', { ...io, detection: { stuckThresholdSeconds: -1 } }, T0),
      owners: { n1: 'all', n2: 'all', n3: 'all' },
    },
    {
      name: 'assigns again when a policy goes',
      change: (c) => c.policyMap.delete('all'),
      owners: { n1: 'io', n3: 'io' },
    },
  ];
  for (const c of changes)
    it(c.name, () => {
      const { cluster, ownership } = world();
      const before = ownership.of(cluster);
      c.change(cluster);
      const after = ownership.of(cluster);
      expect(after).not.to.equal(before);
      expect(Object.fromEntries(after.owner)).to.deep.equal(c.owners);
    });

  it('assigns again for a policy made again under its name, with its spec: it is younger now and ranks after', () => {
    const cluster = new MemoryCluster()
      .addPolicy('a', io, T0)
      .addPolicy('b', { nodeSelector: { matchLabels: { zone: 'z' } } }, secondsAfter(T0, 1))
      .addNodes(aNode('n1', { pool: 'io', zone: 'z' }));
    const ownership = new Ownership();
    expect(ownership.of(cluster).owner.get('n1')).to.equal('a');
    cluster.policyMap.set('a', policyObject('a', io, { uid: 'uid-a-2', createdAt: secondsAfter(T0, 2) }));
    expect(ownership.of(cluster).owner.get('n1')).to.equal('b');
  });

  it("lists a policy's nodes, the same array for as long as the assignment holds", () => {
    const { cluster, ownership } = world();
    const io = ownership.ownedBy(cluster, 'io');
    expect(io).to.deep.equal(['n1', 'n3']);
    expect(ownership.ownedBy(cluster, 'all')).to.deep.equal(['n2']);
    expect(ownership.ownedBy(cluster, 'io')).to.equal(io);
    cluster.addNodes(aNode('n2', { pool: 'io' }));
    const changed = ownership.ownedBy(cluster, 'io');
    expect(changed).not.to.equal(io);
    expect(changed).to.deep.equal(['n1', 'n2', 'n3']);
    expect(ownership.ownedBy(cluster, 'all')).to.deep.equal([]);
  });

  it('lists no node for a policy that owns none or is not there', () => {
    const { cluster, ownership } = world();
    cluster.addPolicy('bad', INVALID);
    expect(ownership.ownedBy(cluster, 'bad')).to.deep.equal([]);
    expect(ownership.ownedBy(cluster, 'missing')).to.deep.equal([]);
  });
});

describe('isFrozenPolicy', () => {
  const cluster = new MemoryCluster().addPolicy('good', io).addPolicy('bad', INVALID);
  const cases: { name: string; policy: string | undefined; frozen: boolean }[] = [
    { name: 'freezes what an invalid policy did', policy: 'bad', frozen: true },
    { name: 'does not freeze a valid policy', policy: 'good', frozen: false },
    { name: 'does not freeze a policy that is gone (its things are orphans)', policy: 'gone', frozen: false },
    { name: 'does not freeze when no policy is named', policy: undefined, frozen: false },
  ];
  for (const c of cases)
    it(c.name, () => {
      expect(isFrozenPolicy(cluster, c.policy)).to.equal(c.frozen);
    });
});
