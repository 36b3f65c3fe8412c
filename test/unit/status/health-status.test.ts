import { expect } from 'chai';
import type { SandboxHealthStatus } from '../../../src/api/v1alpha1/index.js';
import {
  detectNodeFindings,
  detectStuckPods,
  indexFailureEvents,
  type EventView,
  type PodView,
} from '../../../src/detection/index.js';
import {
  coarseCount,
  desiredDetectionStatus,
  detectionTransitions,
  type EventBudget,
  MAX_LISTED_STUCK_PODS,
  podsNewlyExplainedByIo,
  POD_EVENTS_PER_NODE,
} from '../../../src/status/health-status.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../support/builders.js';
import { aNode } from '../../support/memory-cluster.js';

describe('coarseCount', () => {
  const table: [number, number][] = [
    [0, 0],
    [1, 1],
    [2, 2],
    [3, 2],
    [4, 2],
    [5, 5],
    [9, 5],
    [10, 10],
    [19, 10],
    [20, 20],
    [49, 20],
    [50, 50],
    [99, 50],
    [100, 100],
    [12_345, 10_000],
  ];
  for (const [n, published] of table) {
    it(`publishes ${n} failure(s) as ${published}`, () => {
      expect(coarseCount(n)).to.equal(published);
    });
  }
});

describe('desiredDetectionStatus of stuck pods', () => {
  const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
  const deadline =
    'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded';
  /** The stored status after a pass at `seconds` with the pod's failure Events as given. */
  function pass(
    seconds: number,
    events: ReturnType<typeof anEvent>[],
    previous: SandboxHealthStatus | undefined,
  ): SandboxHealthStatus {
    const now = secondsAfter(T0, seconds);
    const stuck = detectStuckPods([pod], indexFailureEvents(events.map((e) => e.build())), {
      stuckThresholdSeconds: 30,
      now,
    });
    const findings = detectNodeFindings(stuck, ['n1'], 1).get('n1')!;
    const status = desiredDetectionStatus({
      policyName: 'p',
      node: aNode('n1'),
      findings,
      minStuckPods: 1,
      thresholdSeconds: 30,
      previous,
      now,
    });
    return JSON.parse(JSON.stringify(status)) as SandboxHealthStatus;
  }

  it('keeps causeSince through retries of the same cause and moves it when the cause changes', () => {
    const first = pass(
      40,
      [anEvent().about(pod).saying(deadline).times(3).at(secondsAfter(T0, 35))],
      undefined,
    );
    expect(first.stuckPods![0]).to.include({
      cause: 'DeadlineExceeded',
      failureCount: 2,
      causeSince: secondsAfter(T0, 35).toISOString(),
    });
    const retried = pass(
      50,
      [anEvent().about(pod).saying(deadline).times(4).at(secondsAfter(T0, 48))],
      first,
    );
    expect(retried).to.deep.equal(first);
    const reserved = pass(
      60,
      [
        anEvent().about(pod).saying(deadline).times(4).at(secondsAfter(T0, 48)),
        anEvent().about(pod).saying(nameReservedMessage(pod)).times(1).at(secondsAfter(T0, 58)),
      ],
      retried,
    );
    expect(reserved.stuckPods![0]).to.include({
      cause: 'NameReserved',
      failureCount: 5,
      causeSince: secondsAfter(T0, 58).toISOString(),
    });
  });

  it('keeps lastMessage while the cause holds, though each retry names another sandbox', () => {
    const cni = (id: string) =>
      `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "${id}": plugin type="calico" failed (add): connection refused`;
    const first = pass(
      40,
      [anEvent().about(pod).saying(cni('aaa111')).times(2).at(secondsAfter(T0, 35))],
      undefined,
    );
    expect(first.stuckPods![0]!.lastMessage).to.contain('aaa111');
    const retried = pass(
      50,
      [anEvent().about(pod).saying(cni('bbb222')).times(3).at(secondsAfter(T0, 48))],
      first,
    );
    expect(retried, 'a retry with a new sandbox id writes nothing').to.deep.equal(first);
  });
});

/** The desired status and its Events after a pass at T0+60 s over `pods` on n1 with their failure Events. */
function reportOn(
  pods: PodView[],
  events: EventView[],
  budget: EventBudget = { pods: POD_EVENTS_PER_NODE, node: true },
) {
  const now = secondsAfter(T0, 60);
  const stuck = detectStuckPods(pods, indexFailureEvents(events), { stuckThresholdSeconds: 30, now });
  const findings = detectNodeFindings(stuck, ['n1'], 1).get('n1')!;
  const desired = desiredDetectionStatus({
    policyName: 'p',
    node: aNode('n1'),
    findings,
    minStuckPods: 1,
    thresholdSeconds: 30,
    now,
    previous: undefined,
  });
  return { desired, events: detectionTransitions(aNode('n1'), undefined, desired, budget) };
}

describe('the runtime named in what users read', () => {
  // cri-o's wording (https://github.com/cri-o/cri-o/issues/9097): the status, the pod's Event and the node's
  // condition name cri-o; containerd's default wording names containerd.
  const crio = (p: { name: string; namespace: string; uid: string }) =>
    `Failed to create pod sandbox: rpc error: code = Unknown desc = error reserving pod name k8s_${p.name}_${p.namespace}_${p.uid}_0 for id ${'ab'.repeat(32)}: name is reserved`;
  function reported(message: (p: { name: string; namespace: string; uid: string }) => string) {
    const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
    const { desired, events } = reportOn([pod], [anEvent().about(pod).saying(message(pod)).build()], {
      pods: 3,
      node: true,
    });
    return {
      pod: desired.stuckPods[0]!,
      podEvent: events.find((e) => e.reason === 'SandboxCreationStuck')!.message,
      degraded: desired.conditions.find((c) => c.type === 'SandboxCreationDegraded')!.message,
    };
  }

  it("names cri-o when the wording is cri-o's", () => {
    const { pod, podEvent, degraded } = reported(crio);
    expect(pod).to.include({ cause: 'NameReserved', runtime: 'cri-o' });
    expect(podEvent).to.match(/cause NameReserved.*, as cri-o words it\.$/);
    expect(degraded).to.include('the failures point at cri-o too slow to answer (disk IO)');
  });

  it('names the Windows runtime in words, not as "windows"', () => {
    // A containerd reservation on a Windows node (the hcs:: prefix tells the classifier so); built for this test.
    const { podEvent, degraded } = reported(
      () =>
        'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "a_b_c_0": name "a_b_c_0" is reserved for "abc": hcs::CreateComputeSystem: context deadline exceeded',
    );
    expect(degraded).to.include('point at the Windows runtime (hcsshim) too slow to answer');
    expect(podEvent).to.match(/, as the Windows runtime \(hcsshim\) words it\.$/);
  });

  it("names containerd for containerd's wording", () => {
    const { pod, degraded } = reported(nameReservedMessage);
    expect(pod.runtime).to.equal('containerd');
    expect(degraded).to.include('point at containerd too slow');
  });
});

describe('detectionTransitions of newly stuck pods', () => {
  /** Events for `count` pods newly stuck on n1, the first `withCause` of them with a kubelet failure Event. */
  function eventsFor(
    count: number,
    withCause: number,
    budget: EventBudget = { pods: POD_EVENTS_PER_NODE, node: true },
  ) {
    const pods = Array.from({ length: count }, (_, i) =>
      aPod().named(`web-${i}`).onNode('n1').waitingSince(T0).build(),
    );
    const events = pods
      .slice(0, withCause)
      .map((p) => anEvent().about(p).saying(nameReservedMessage(p)).build());
    return reportOn(pods, events, budget).events.filter((t) => t.reason === 'SandboxCreationStuck');
  }

  it('gives each of a few pods stuck for a known cause an Event of its own, and pods of no known cause none', () => {
    const events = eventsFor(POD_EVENTS_PER_NODE + 2, POD_EVENTS_PER_NODE);
    expect(events.map((e) => `${e.target.kind}/${e.target.name}`)).to.have.members([
      'Pod/web-0',
      'Pod/web-1',
      'Pod/web-2',
    ]);
  });

  it('gives the first pods an Event each, and the rest of known cause one Event on the node', () => {
    const events = eventsFor(40, 20);
    expect(events).to.have.length(POD_EVENTS_PER_NODE + 1);
    const node = events.find((e) => e.target.kind === 'Node')!;
    expect(node.target.name).to.equal('n1');
    expect(node.message).to.match(
      /^17 more pod\(s\) stuck waiting for a sandbox: default\/web-\d+ \(NameReserved\)/,
    );
    expect(node.message).to.contain('and 7 more');
  });

  it('gives a listed pod its Event when its cause becomes known', () => {
    const pod = aPod().named('late').onNode('n1').waitingSince(T0).build();
    const now = secondsAfter(T0, 60);
    const status = (events: ReturnType<typeof anEvent>[]) => {
      const stuck = detectStuckPods([pod], indexFailureEvents(events.map((e) => e.build())), {
        stuckThresholdSeconds: 30,
        now,
      });
      return desiredDetectionStatus({
        policyName: 'p',
        node: aNode('n1'),
        findings: detectNodeFindings(stuck, ['n1'], 1).get('n1')!,
        minStuckPods: 1,
        thresholdSeconds: 30,
        now,
        previous: undefined,
      });
    };
    const budget = { pods: POD_EVENTS_PER_NODE, node: true };
    const unknown = status([]);
    const stuckEvents = (previous: typeof unknown | undefined, desired: typeof unknown) =>
      detectionTransitions(aNode('n1'), previous as SandboxHealthStatus | undefined, desired, budget)
        .filter((t) => t.reason === 'SandboxCreationStuck')
        .map((t) => `${t.target.kind}/${t.target.name}`);
    expect(stuckEvents(undefined, unknown)).to.deep.equal([]);
    const known = status([anEvent().about(pod).saying(nameReservedMessage(pod))]);
    expect(stuckEvents(unknown, known)).to.deep.equal(['Pod/late']);
    expect(stuckEvents(known, known)).to.deep.equal([]);
  });

  it('gives no more Events than the budget the window has left', () => {
    const names = (budget: EventBudget) =>
      eventsFor(5, 5, budget).map((e) => `${e.target.kind}/${e.target.name}`);
    expect(names({ pods: 1, node: true })).to.deep.equal(['Pod/web-0', 'Node/n1']);
    expect(names({ pods: 1, node: false })).to.deep.equal(['Pod/web-0']);
    expect(names({ pods: 0, node: false })).to.deep.equal([]);
    expect(names({ pods: -2, node: true })).to.deep.equal(['Node/n1']);
  });
});

describe('podsNewlyExplainedByIo', () => {
  type Cause = NonNullable<SandboxHealthStatus['stuckPods']>[number]['cause'];
  const listed = (uid: string, cause: Cause) => ({
    namespace: 'default',
    name: uid,
    uid,
    waitingReason: 'ContainerCreating',
    waitingSince: '2026-01-01T00:00:00Z',
    cause,
    failureCount: 1,
  });
  const newly = (previous: SandboxHealthStatus | undefined, desired: ReturnType<typeof listed>[]) =>
    podsNewlyExplainedByIo(previous, { stuckPods: desired }).map((p) => p.uid);

  it('names pods listed from IO that the stored status did not list so: new, or their cause now IO', () => {
    const previous = {
      stuckPods: [listed('a', 'NameReserved'), listed('b', 'Network'), listed('c', 'Unknown')],
    };
    const desired = [
      listed('a', 'NameReserved'),
      listed('b', 'DeadlineExceeded'),
      listed('c', 'NameReserved'),
      listed('d', 'NameReserved'),
      listed('e', 'ImagePull'),
      listed('f', 'Unknown'),
    ];
    expect(newly(previous, desired)).to.deep.equal(['b', 'c', 'd']);
    expect(newly(undefined, desired)).to.deep.equal(['a', 'b', 'c', 'd']);
  });

  it('counts a pod a full stored list had no room for as explained already', () => {
    const full = Array.from({ length: MAX_LISTED_STUCK_PODS }, (_, i) => listed(`p${i}`, 'NameReserved'));
    expect(newly({ stuckPods: full }, [listed('late', 'NameReserved')])).to.deep.equal([]);
    expect(newly({ stuckPods: full.slice(1) }, [listed('late', 'NameReserved')])).to.deep.equal(['late']);
  });
});
