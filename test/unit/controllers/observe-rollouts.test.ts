import { expect } from 'chai';
import { observeRollouts, SETTLE_DEADLINE_MS } from '../../../src/controllers/observe-rollouts.js';
import { deploymentOf, type PodView } from '../../../src/detection/index.js';
import { aPod, aRollingDeployment, T0 } from '../../support/builders.js';

const ofDeployment = (name: string, hash = '5d8f7c9b4'): PodView => ({
  ...aPod().named(`${name}-${hash}-x1`, 'shop').onNode('n1').build(),
  labels: { app: name, 'pod-template-hash': hash },
  controllerKind: 'ReplicaSet',
  controllerName: `${name}-${hash}`,
});
const view = aRollingDeployment;

describe('deploymentOf', () => {
  it('names the Deployment from the ReplicaSet name and the pod-template-hash label', () => {
    expect(deploymentOf(ofDeployment('web'))).to.equal('shop/web');
    expect(deploymentOf(ofDeployment('my-api-v2', 'abc12'))).to.equal('shop/my-api-v2');
  });
  it('is undefined for pods of other controllers, or when the names do not fit', () => {
    expect(deploymentOf({ ...ofDeployment('web'), controllerKind: 'StatefulSet' })).to.equal(undefined);
    expect(deploymentOf({ ...ofDeployment('web'), labels: {} })).to.equal(undefined);
    expect(deploymentOf({ ...ofDeployment('web'), controllerName: 'other-rs' })).to.equal(undefined);
    expect(deploymentOf({ ...ofDeployment('web'), controllerName: '-5d8f7c9b4' })).to.equal(undefined);
  });
});

describe('observeRollouts', () => {
  it('lists the saturated nodes each Deployment feeds, and takes dry-run pauses from status', () => {
    const simulatedStamps = { policy: 'p', since: T0, reason: 'RolloutQueued' as const, startedAt: T0 };
    const facts = observeRollouts({
      workloads: [view('web'), view('api'), view('db', { paused: true })],
      stuckOnSaturated: new Map([
        ['n2', [ofDeployment('web')]],
        ['n1', [ofDeployment('web'), ofDeployment('web', 'ffff')]],
      ]),
      simulated: new Map([['Deployment/shop/api', simulatedStamps]]),
      dryRun: true,
      startedAt: (d) => d.createdAt,
      now: T0,
    });
    expect(facts.map((f) => [f.name, f.feeds, f.paused, f.stamps?.reason])).to.deep.equal([
      ['web', ['n1', 'n2'], false, undefined],
      ['api', [], true, 'RolloutQueued'],
      ['db', [], true, undefined],
    ]);
  });

  it('ignores simulated pauses in a real run', () => {
    const facts = observeRollouts({
      workloads: [view('api')],
      stuckOnSaturated: new Map(),
      simulated: new Map([
        ['Deployment/shop/api', { policy: 'p', since: T0, reason: 'RolloutQueued', startedAt: T0 }],
      ]),
      dryRun: false,
      startedAt: (d) => d.createdAt,
      now: T0,
    });
    expect(facts[0]).to.include({ paused: false });
    expect(facts[0]!.stamps).to.equal(undefined);
  });

  it('lets a StatefulSet or DaemonSet that is only settling hold a slot for the progress deadline, no longer', () => {
    const settling = view('db', { kind: 'StatefulSet', settling: true });
    const at = (ms: number) =>
      observeRollouts({
        workloads: [settling, view('web')],
        stuckOnSaturated: new Map(),
        simulated: new Map(),
        dryRun: false,
        startedAt: () => T0,
        now: new Date(T0.getTime() + ms),
      }).map((f) => f.rollingOut);
    expect(at(SETTLE_DEADLINE_MS)).to.deep.equal([true, true]);
    expect(at(SETTLE_DEADLINE_MS + 1), 'a pod that never becomes ready takes no slot').to.deep.equal([
      false,
      true,
    ]);
  });
});
