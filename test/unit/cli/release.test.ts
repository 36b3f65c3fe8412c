import { expect } from 'chai';
import { nodeLeftAs, parseReleaseTarget, workloadLeftAs } from '../../../src/cli/release.js';
import { T0 } from '../../support/builders.js';
import { aNode } from '../../support/memory-cluster.js';

describe('release', () => {
  const targets: [string, unknown][] = [
    ['worker-7', { kind: 'Node', name: 'worker-7' }],
    ['node/worker-7', { kind: 'Node', name: 'worker-7' }],
    ['Node/worker-7', { kind: 'Node', name: 'worker-7' }],
    ['deployment/shop/web', { kind: 'Deployment', namespace: 'shop', name: 'web' }],
    ['statefulset/shop/db', { kind: 'StatefulSet', namespace: 'shop', name: 'db' }],
    ['daemonset/logs/shipper', { kind: 'DaemonSet', namespace: 'logs', name: 'shipper' }],
    ['rollout/shop/front', { kind: 'Rollout', namespace: 'shop', name: 'front' }],
  ];
  for (const [text, target] of targets)
    it(`reads ${text}`, () => {
      expect(parseReleaseTarget(text)).to.deep.equal(target);
    });
  for (const text of ['', 'deployment/web', 'job/shop/x', 'pod/shop/web', 'deployment/shop/', 'a/b/c/d'])
    it(`refuses ${JSON.stringify(text)}, saying what it takes`, () => {
      expect(parseReleaseTarget(text))
        .to.have.property('problem')
        .that.match(/names no node/);
    });

  it('says what a released node is left as, and how to end it', () => {
    const stamps = { policy: 'p', since: T0, reason: 'r', cordoned: true };
    const taint = { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' };
    expect(nodeLeftAs({ ...aNode('w1'), unschedulable: true, stamps: { ...stamps, taint } })).to.equal(
      'It stays cordoned and tainted sandbox.remediator.io/io-pressure=true:NoSchedule; the operator will not undo it. When you are done: kubectl uncordon w1; kubectl taint node w1 sandbox.remediator.io/io-pressure-.',
    );
    expect(nodeLeftAs({ ...aNode('w1'), stamps })).to.equal('It carries no fence of ours.');
  });

  it('says what a released rollout is left as, with the strategy its hold replaced', () => {
    const base = {
      namespace: 'shop',
      uid: 'u',
      generation: 1,
      createdAt: T0,
      rollingOut: true,
    };
    expect(workloadLeftAs({ ...base, kind: 'Deployment', name: 'web', paused: true })).to.match(
      /stays paused.*kubectl rollout resume deployment\/web -n shop/,
    );
    expect(
      workloadLeftAs({
        ...base,
        kind: 'StatefulSet',
        name: 'db',
        paused: true,
        held: { strategy: { type: 'RollingUpdate', rollingUpdate: { partition: 0 } }, partition: 2 },
      }),
    ).to.include(`-p '{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":0}}}}'`);
  });
});
