// The Reporter alone, over a policy's memory built by hand: each node's SandboxHealth planned from what the memory
// holds when its write starts, written once however often it is asked for, and its failures handed to the apply
// queue.
import { expect } from 'chai';
import { MutationCache } from '../../../../src/controllers/reporting/mutation-cache.js';
import { Reporter } from '../../../../src/controllers/reporting/reporter.js';
import { UnreportedResults } from '../../../../src/controllers/reporting/unreported.js';
import { PolicyMemory } from '../../../../src/controllers/policy-memory.js';
import {
  detectNodeFindings,
  detectStuckPods,
  indexFailureEvents,
  type PodView,
} from '../../../../src/detection/index.js';
import { silentLogger } from '../../../../src/observability/log.js';
import { FakeClock } from '../../../../src/runtime/clock.js';
import { Expectations } from '../../../../src/runtime/expectations.js';
import { desiredDetectionStatus } from '../../../../src/status/health-status.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode, MemoryCluster } from '../../../support/memory-cluster.js';

function aReporter(writeConcurrency = 2) {
  const cluster = new MemoryCluster().addNodes(aNode('n1'), aNode('n2'));
  const clock = new FakeClock(secondsAfter(T0, 600).getTime());
  const unreported = new UnreportedResults();
  const failed: string[] = [];
  /** Whether the policy's writes wait for the apply queue's retry. */
  const failing = { now: false };
  const requeues: number[] = [];
  const reporter = new Reporter({
    writer: cluster,
    recorder: cluster,
    mutations: new MutationCache(cluster, new Expectations(clock)),
    clock,
    logger: silentLogger,
    unreported,
    writeConcurrency,
    requeue: (_policy, afterMs) => requeues.push(afterMs),
    failures: {
      fail: (policy, error) => failed.push(`${policy}: ${String(error)}`),
      failing: () => failing.now,
    },
  });
  const memory = new PolicyMemory('uid-p');
  memory.startPass(1, ['n1', 'n2'], clock.now());
  /** A pass's look at a quiet node, and a decision about it (nothing to do), as the memory keeps them. */
  const look = (name: string, stuck: PodView[] = []) => {
    const node = cluster.nodeMap.get(name)!;
    const now = new Date(clock.now());
    const events = stuck.map((pod) => anEvent().about(pod).saying(nameReservedMessage(pod)).build());
    const findings = detectNodeFindings(
      detectStuckPods(stuck, indexFailureEvents(events), { stuckThresholdSeconds: 30, now }),
      [name],
      1,
    ).get(name)!;
    const health = cluster.health(name);
    const detection = desiredDetectionStatus({
      policyName: 'p',
      node,
      findings,
      minStuckPods: 1,
      thresholdSeconds: 30,
      previous: health?.status,
      now,
    });
    const state = memory.state(name);
    state.observation = {
      node,
      previous: health?.status,
      exists: health !== undefined,
      findings,
      io: undefined,
      detection,
      ioHeavyPods: [],
      version: undefined,
      dueAt: Infinity,
      reportsApplied: unreported.applied(name),
    };
    state.remediation = {
      blocked: [],
      stampsAfter: undefined,
      unschedulable: false,
      throttling: [],
      notTriggered: undefined,
      simulated: false,
      dryRun: false,
    };
  };
  return { cluster, clock, reporter, memory, look, failed, failing, requeues };
}

describe('the Reporter', () => {
  it("creates a node's SandboxHealth and writes its status once, however often it is asked for meanwhile", async () => {
    const { cluster, reporter, memory, look } = aReporter();
    look('n1');
    expect(reporter.submit('p', memory, 'n1')).to.equal(true);
    reporter.submit('p', memory, 'n1');
    reporter.submit('p', memory, 'n1');
    await reporter.idle();
    expect(cluster.takeWrites()).to.deep.equal(['create health/n1', 'patch health/n1']);
    expect(cluster.health('n1')!.status).to.include({ policy: 'p', state: 'Healthy' });
  });

  it('writes nothing when the API already holds what the node should say', async () => {
    const { cluster, reporter, memory, look } = aReporter();
    look('n1');
    reporter.submit('p', memory, 'n1');
    await reporter.idle();
    cluster.takeWrites();
    look('n1');
    expect(reporter.submit('p', memory, 'n1')).to.equal(false);
    await reporter.idle();
    expect(cluster.takeWrites()).to.deep.equal([]);
  });

  it('writes nothing for a node its policy has decided nothing about yet', () => {
    const { reporter, memory, look } = aReporter();
    look('n1');
    delete memory.state('n1').remediation;
    expect(reporter.submit('p', memory, 'n1')).to.equal(false);
  });

  it('hands a failed write to the apply queue and has the node looked at again, the other nodes written', async () => {
    const { cluster, reporter, memory, look, failed } = aReporter();
    look('n1');
    look('n2');
    cluster.failNextHealthPatch.set('n1', new Error('etcdserver: leader changed'));
    reporter.submit('p', memory, 'n1');
    reporter.submit('p', memory, 'n2');
    await reporter.idle();
    expect(failed).to.deep.equal(['p: Error: etcdserver: leader changed']);
    expect(cluster.health('n2')!.status).to.include({ policy: 'p' });
    expect([...memory.startPass(1, ['n1', 'n2'], 0).dirty]).to.deep.equal(['n1']);
  });

  it('drops the report of a node that is gone while it waits its turn', async () => {
    const { cluster, reporter, memory, look } = aReporter(1);
    look('n1');
    look('n2');
    reporter.submit('p', memory, 'n1');
    reporter.submit('p', memory, 'n2');
    reporter.forgetNode('n2');
    await reporter.idle();
    expect(cluster.takeWrites().filter((w) => w.endsWith('/n2'))).to.deep.equal([]);
  });

  it("drops the reports a deleted policy still waits to write, and writes its namesake's", async () => {
    const { cluster, reporter, memory, look } = aReporter(1);
    look('n1');
    look('n2');
    reporter.submit('p', memory, 'n1');
    reporter.submit('p', memory, 'n2');
    reporter.forgetPolicy(memory);
    await reporter.idle();
    expect(
      cluster.takeWrites().filter((w) => w.endsWith('/n2')),
      'n1 was being written; n2 waited',
    ).to.deep.equal([]);
    const again = new PolicyMemory('uid-p-again');
    again.startPass(1, ['n2'], 0);
    again.state('n2').observation = memory.state('n2').observation!;
    again.state('n2').remediation = memory.state('n2').remediation!;
    reporter.submit('p', again, 'n2');
    reporter.forgetPolicy(memory);
    await reporter.idle();
    expect(cluster.takeWrites().filter((w) => w.endsWith('/n2'))).to.not.deep.equal([]);
  });

  for (const failingNow of [false, true])
    it(`${failingNow ? 'asks for no pass' : 'asks for a pass at once'} once a report first explains a stuck pod on a fenced node${failingNow ? ", while the policy's writes wait for their retry" : ''}`, async () => {
      const { cluster, reporter, memory, look, failing, requeues } = aReporter();
      cluster.nodeMap.set('n1', { ...cluster.nodeMap.get('n1')!, unschedulable: true });
      const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
      look('n1', [pod]);
      failing.now = failingNow;
      reporter.submit('p', memory, 'n1');
      await reporter.idle();
      expect(cluster.health('n1')!.status!.stuckPods!.map((p) => p.name)).to.deep.equal(['web-1']);
      expect(requeues).to.deep.equal(failingNow ? [] : [0]);
    });
});
