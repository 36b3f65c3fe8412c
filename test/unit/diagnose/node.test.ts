import { expect } from 'chai';
import { diagnoseNode } from '../../../src/diagnose/node.js';
import type { WorkloadView } from '../../../src/detection/index.js';
import {
  aNode,
  aPolicy,
  at,
  HOLDER,
  NOW,
  OTHER_UID,
  POD_UID,
  remediatingInput,
  reservedMessage,
  secondsAfter,
  T0,
} from '../../support/diagnosis.js';

describe('diagnoseNode', () => {
  describe('stuck pods', () => {
    const d = diagnoseNode(remediatingInput());

    it('lists each stuck pod with its cause, wait, failure count and message', () => {
      expect(d.stuckPods.count).to.equal(2);
      expect(
        d.stuckPods.listed.map((p) => [p.namespace, p.name, p.cause, p.waitingSeconds, p.failureCount]),
      ).to.deep.equal([
        ['shop', 'web-1', 'NameReserved', 600, 10],
        ['shop', 'web-2', 'DeadlineExceeded', 570, 2],
      ]);
      expect(d.stuckPods.listed[1]!.lastMessage).to.equal(
        'rpc error: code = DeadlineExceeded desc = context deadline exceeded',
      );
      expect(d.stuckPods.degraded).to.include({ status: 'True', reason: 'StuckPodsAboveThreshold' });
      expect(d.stuckPods.ioEvidence).to.equal('IoSuspected');
    });

    it('passes on the runtime the message names', () => {
      const input = remediatingInput((i) => (i.health!.status!.stuckPods![0]!.runtime = 'containerd'));
      expect(diagnoseNode(input).stuckPods.listed.map((p) => p.runtime)).to.deep.equal([
        'containerd',
        undefined,
      ]);
    });

    it('parses the reserved sandbox name out of a NameReserved message, with the id holding it', () => {
      expect(d.stuckPods.listed[0]).to.include({
        reservedName: `web-1_shop_${POD_UID}_0`,
        reservedFor: HOLDER,
      });
      expect(d.stuckPods.listed[1]).to.not.have.property('reservedName');
      expect(d.stuckPods.listed[1]).to.not.have.property('reservedFor');
    });

    it("takes the name from the pod's latest Event when status kept no message", () => {
      const input = remediatingInput((i) => {
        delete i.health!.status!.stuckPods![0]!.lastMessage;
        delete i.health!.status!.stuckPods![0]!.reservedFor;
      });
      expect(diagnoseNode(input).stuckPods.listed[0]).to.include({
        reservedName: `web-1_shop_${POD_UID}_0`,
        reservedFor: 'b'.repeat(64),
      });
    });

    it("adds the latest FailedCreatePodSandBox Event's count and age, and none for a pod without one", () => {
      expect(d.stuckPods.listed[0]!.latestEvent).to.deep.include({
        count: 37,
        lastTime: secondsAfter(T0, 598).toISOString(),
        ageSeconds: 2,
      });
      expect(d.stuckPods.listed[1]).to.not.have.property('latestEvent');
    });
  });

  describe('IO evidence', () => {
    it('gives the source and age of the reading, the values over the thresholds, and the IoPressureHigh condition', () => {
      const { io } = diagnoseNode(remediatingInput());
      expect(io.reading).to.deep.include({
        source: 'agent',
        observedTime: at(595),
        ageSeconds: 5,
        stale: false,
        staleAfterSeconds: 90,
        psiSomeAvg10Percent: 38.24,
        diskBusyPercent: 97.3,
        blockedProcesses: 14,
      });
      expect(io.reading!.over).to.deep.equal([
        'PSI some avg10 >= 30%',
        'disk busy >= 90%',
        'blocked tasks >= 8',
      ]);
      expect(io.reading!.thresholds).to.deep.equal({
        psiSomeAvg10Percent: 30,
        psiFullAvg10Percent: 20,
        diskBusyPercent: 90,
        blockedProcesses: 8,
      });
      expect(io.pressure).to.deep.equal({ observation: 'Over', since: at(100), sinceSeconds: 500 });
      expect(io.condition).to.include({
        type: 'IoPressureHigh',
        status: 'True',
        reason: 'ThresholdSustained',
      });
    });

    it('ages a reading from when the apiserver took it when that is earlier (an agent clock ahead)', () => {
      const input = remediatingInput((i) => {
        i.health!.status!.ioReading!.observedTime = at(3595); // an hour ahead
        i.health!.readingWrittenTime = at(400);
      });
      const reading = diagnoseNode(input).io.reading!;
      expect(reading.ageSeconds).to.equal(199);
      expect(reading.stale).to.equal(true);
      expect(reading.over).to.deep.equal([]);
    });

    it('says nothing of thresholds or staleness without a readable policy, and has no reading without one', () => {
      const noPolicy = diagnoseNode(remediatingInput((i) => delete i.policy)).io.reading!;
      expect(noPolicy).to.not.have.any.keys('stale', 'staleAfterSeconds', 'thresholds');
      expect(noPolicy.ageSeconds).to.equal(5);
      const none = diagnoseNode(remediatingInput((i) => delete i.health!.status!.ioReading));
      expect(none.io).to.not.have.property('reading');
      expect(none.nodeEvidence).to.deep.equal({ dStateTasks: [] });
    });
  });

  it('lists D-state tasks runtime first, with the kworker CPU', () => {
    const { nodeEvidence } = diagnoseNode(remediatingInput());
    expect(nodeEvidence.dStateTasks.map((t) => [t.pid, t.comm, t.wchan, t.runtime])).to.deep.equal([
      [5151, 'runc:[2:INIT]', 'do_mount', true],
      [4242, 'kworker/u8:2', 'io_schedule', false],
    ]);
    expect(nodeEvidence.kworkerCpuPercent).to.equal(42.5);
  });

  describe('runtime', () => {
    it('is taken from status when the operator assessed it', () => {
      expect(diagnoseNode(remediatingInput()).runtime).to.include({
        version: 'containerd://1.6.0',
        predatesMountFix: false,
        from: 'status',
      });
    });

    it("is assessed from the Node's containerRuntimeVersion when status has none", () => {
      const input = remediatingInput((i) => {
        delete i.health!.status!.runtime;
        i.node!.view.runtimeVersion = 'containerd://1.5.9';
      });
      const runtime = diagnoseNode(input).runtime!;
      expect(runtime).to.include({ version: 'containerd://1.5.9', predatesMountFix: true, from: 'node' });
      expect(runtime.note).to.match(/Predates containerd 1\.5\.10\/1\.6\.0/);
    });

    it('is absent with neither', () => {
      const input = remediatingInput((i) => {
        delete i.health!.status!.runtime;
        delete i.node!.view.runtimeVersion;
      });
      expect(diagnoseNode(input)).to.not.have.property('runtime');
    });
  });

  describe('what the operator did', () => {
    it('gives the cordon, the stamps, the remediation record and the actions with their ages', () => {
      const { done } = diagnoseNode(remediatingInput());
      expect(done.unschedulable).to.equal(true);
      expect(done.cordonedByOperator).to.equal(true);
      expect(done.stamps).to.include({ 'sandbox.remediator.io/cordoned': 'true' });
      expect(done.remediation).to.include({ policy: 'p1', cordoned: true, dryRun: false });
      expect(done.actions.map((a) => [a.kind, a.outcome, a.ageSeconds])).to.deep.equal([
        ['Evict', 'Succeeded', 460],
        ['Cordon', 'Succeeded', 465],
      ]);
      expect(done.lastAction).to.equal('Evict Succeeded');
    });

    it("lists the operator's Events on the Node newest first", () => {
      const { done } = diagnoseNode(remediatingInput());
      expect(done.nodeEvents.map((e) => [e.reason, e.ageSeconds])).to.deep.equal([
        ['EvictedStuckPod', 460],
        ['Cordoned', 465],
        ['IoPressureHigh', 470],
      ]);
    });

    it('tells a cordon by someone else from ours: no stamps', () => {
      const d = diagnoseNode(remediatingInput((i) => (i.node = aNode('n1', {}, true))));
      expect(d.done.unschedulable).to.equal(true);
      expect(d.done.cordonedByOperator).to.equal(false);
      expect(d.done.stamps).to.deep.equal({});
    });

    it("lists the rollouts of every kind the node's policy holds, oldest first, marking those whose pods were stuck here", () => {
      const paused = (
        name: string,
        policy: string,
        since: number,
        reason: 'FeedsSaturatedNode' | 'RolloutQueued',
        kind: WorkloadView['kind'] = 'Deployment',
      ): WorkloadView => ({
        kind,
        namespace: 'shop',
        name,
        uid: `uid-${name}`,
        generation: 2,
        paused: true,
        createdAt: T0,
        rollingOut: true,
        stamps: { policy, since: secondsAfter(T0, since), reason, startedAt: secondsAfter(T0, since) },
      });
      const input = remediatingInput((i) => {
        i.heldRollouts = [
          paused('queued', 'p1', 200, 'RolloutQueued'),
          paused('web', 'p1', 150, 'FeedsSaturatedNode'),
          paused('theirs', 'p2', 100, 'FeedsSaturatedNode'),
          paused('db', 'p1', 300, 'FeedsSaturatedNode', 'StatefulSet'),
        ];
        i.policy = aPolicy(
          {},
          {
            ...aPolicy().status!,
            throttledRollouts: [
              {
                deployment: 'shop/web',
                reason: 'FeedsSaturatedNode',
                feeds: ['n1'],
                since: at(150),
                dryRun: false,
              },
              { deployment: 'shop/queued', reason: 'RolloutQueued', since: at(200), dryRun: false },
              {
                kind: 'StatefulSet',
                name: 'shop/db',
                reason: 'FeedsSaturatedNode',
                feeds: ['n1'],
                since: at(300),
                dryRun: false,
              },
            ],
          },
        );
      });
      expect(
        diagnoseNode(input).done.heldRollouts.map((p) => [
          p.kind,
          p.name,
          p.reason,
          p.sinceSeconds,
          p.feedsThisNode,
        ]),
      ).to.deep.equal([
        ['Deployment', 'web', 'FeedsSaturatedNode', 450, true],
        ['Deployment', 'queued', 'RolloutQueued', 400, false],
        ['StatefulSet', 'db', 'FeedsSaturatedNode', 300, true],
      ]);
    });

    it("counts the pods at the pacing gate of the node's policy and lists the oldest", () => {
      const gated = (name: string, policy: string | undefined, since: number) => ({
        kind: 'Deployment',
        namespace: 'shop',
        name,
        uid: `uid-${name}`,
        gates: ['sandbox.remediator.io/paced'],
        ...(policy ? { policy } : {}),
        gatedAt: secondsAfter(T0, since),
      });
      const input = remediatingInput((i) => {
        i.gatedPods = [
          gated('new', 'p1', 500),
          gated('old', 'p1', 300),
          gated('other', 'p2', 100),
          gated('anon', undefined, 400),
        ];
      });
      const { gatedPods } = diagnoseNode(input).done;
      expect(gatedPods.count).to.equal(3);
      expect(gatedPods.oldest.map((p) => [p.name, p.sinceSeconds])).to.deep.equal([
        ['old', 300],
        ['anon', 200],
        ['new', 100],
      ]);
    });

    it("takes a dry run's would-be stamps from status: nothing is on the Node", () => {
      const input = remediatingInput((i) => {
        i.node = aNode('n1', {}, false);
        i.health!.status!.remediation!.dryRun = true;
      });
      const d = diagnoseNode(input);
      expect(d.done.cordonedByOperator).to.equal(false);
      expect(d.summary).to.contain('cordoned by policy p1 (dry run)');
      expect(d.next.map((n) => n.action)).to.deep.equal(['Evict', 'Wait']);
    });
  });

  it('sums the node up in one line', () => {
    expect(diagnoseNode(remediatingInput()).summary).to.equal(
      'n1: Remediating; 2 pod(s) stuck (DeadlineExceeded 1, NameReserved 1); IO pressure proven (agent, 5s ago); cordoned by policy p1; 1 pod(s) evicted',
    );
  });

  it('diagnoses a Node without a SandboxHealth: runtime from the Node, next unknown', () => {
    const input = remediatingInput((i) => {
      delete i.health;
      delete i.policy;
      i.node = aNode('n1', {}, false);
    });
    const d = diagnoseNode(input);
    expect(d.found).to.deep.equal({ sandboxHealth: false, node: true });
    expect(d.summary).to.equal(
      'n1: no SandboxHealth (no policy selects the node, or the operator is not running)',
    );
    expect(d.runtime).to.include({ from: 'node' });
    expect(d.next).to.deep.equal([
      {
        action: 'Unknown',
        text: 'no SandboxHealth: no SandboxPolicy selects this node, or the operator is not running',
      },
    ]);
    expect(d).to.not.have.property('policy');
  });

  it('keeps the stuck-pod uid apart: an Event of another pod is not this one', () => {
    const input = remediatingInput((i) => {
      const event = i.failureEvents.get(POD_UID)!;
      i.failureEvents = new Map([
        [OTHER_UID, { ...event, message: reservedMessage('web-2', 'shop', OTHER_UID) }],
      ]);
    });
    const listed = diagnoseNode(input).stuckPods.listed;
    expect(listed[0]).to.not.have.property('latestEvent');
    expect(listed[1]!.latestEvent!.count).to.equal(37);
    // Status says DeadlineExceeded: a NameReserved Event does not relabel the pod.
    expect(listed[1]).to.not.have.property('reservedName');
  });

  it('passes on the reads that failed', () => {
    const input = remediatingInput((i) => {
      i.unavailable = [{ what: 'list deployments', message: 'forbidden (HTTP 403 Forbidden)' }];
    });
    expect(diagnoseNode(input).unavailable).to.deep.equal([
      { what: 'list deployments', message: 'forbidden (HTTP 403 Forbidden)' },
    ]);
    expect(NOW.toISOString()).to.equal(diagnoseNode(input).generatedAt);
  });
});

describe('diagnoseNode: IO limits (limitIo)', () => {
  const limit = { rbps: 1_048_576, wbps: 20_971_520, riops: 50, wiops: 300 };
  const wanted = (podUid: string, pod: string) => ({
    podUid,
    pod,
    device: '8:0',
    limit,
    policy: 'p1',
    since: T0.toISOString(),
    changedAt: T0.toISOString(),
    floor: { rbps: 1_048_576, wbps: 4_194_304, riops: 50, wiops: 60 },
  });

  it('lists each limit wanted with what the agent reported of it: applied, refused, or not yet', () => {
    const input = remediatingInput((i) => {
      i.health!.ioLimits = [
        wanted('u-db', 'shop/db-0'),
        wanted('u-logs', 'shop/logs-x'),
        wanted('u-q', 'shop/q-0'),
      ];
      i.health!.status!.ioLimits = {
        allowed: true,
        observedTime: T0.toISOString(),
        applied: [
          {
            podUid: 'u-db',
            device: '8:0',
            cgroupVersion: 'v2',
            cgroup: 'kubepods.slice/pod-u-db',
            wanted: limit,
            written: limit,
            before: {},
          },
        ],
        results: [{ podUid: 'u-logs', result: 'NoCgroup', message: 'no cgroup' }],
      };
    });
    const d = diagnoseNode(input);
    expect(d.ioLimits.map((l) => [l.pod, l.state])).to.deep.equal([
      ['shop/db-0', 'Applied'],
      ['shop/logs-x', 'NoCgroup'],
      ['shop/q-0', 'Pending'],
    ]);
  });

  it('has none on a node with no limit wanted', () => {
    expect(diagnoseNode(remediatingInput()).ioLimits).to.deep.equal([]);
  });
});
