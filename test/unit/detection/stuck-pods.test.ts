import { expect } from 'chai';
import { detectStuckPods, indexFailureEvents, type PodView } from '../../../src/detection/index.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../support/builders.js';

const threshold = 180;
const at = (seconds: number) => ({ stuckThresholdSeconds: threshold, now: secondsAfter(T0, seconds) });
const stuckNames = (pods: PodView[], seconds: number, events = new Map()) =>
  detectStuckPods(pods, events, at(seconds)).map((s) => s.pod.name);

describe('detectStuckPods', () => {
  const cases: { name: string; pod: PodView; stuck: boolean }[] = [
    {
      name: 'waiting in ContainerCreating past the threshold',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).build(),
      stuck: true,
    },
    {
      name: 'waiting PodInitializing',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).waitingWith('PodInitializing').build(),
      stuck: true,
    },
    {
      name: 'waiting CreateContainerError',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).waitingWith('CreateContainerError').build(),
      stuck: true,
    },
    {
      name: 'waiting RunContainerError',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).waitingWith('RunContainerError').build(),
      stuck: true,
    },
    {
      name: 'with no container statuses yet',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).withContainers().build(),
      stuck: true,
    },
    { name: 'not scheduled', pod: aPod().named('a').waitingSince(T0).build(), stuck: false },
    { name: 'running', pod: aPod().named('a').onNode('n1').waitingSince(T0).running().build(), stuck: false },
    {
      name: 'waiting in ImagePullBackOff (a different problem)',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).waitingWith('ImagePullBackOff').build(),
      stuck: false,
    },
    {
      name: 'waiting in CrashLoopBackOff',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).waitingWith('CrashLoopBackOff').build(),
      stuck: false,
    },
    {
      name: 'being deleted',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).deleting().build(),
      stuck: false,
    },
    {
      name: 'Failed phase',
      pod: aPod().named('a').onNode('n1').waitingSince(T0).inPhase('Failed').build(),
      stuck: false,
    },
    {
      name: 'one container running while another waits',
      pod: aPod()
        .named('a')
        .onNode('n1')
        .waitingSince(T0)
        .withContainers(
          { name: 'a', init: false, state: 'running' },
          { name: 'b', init: false, state: 'waiting', reason: 'ContainerCreating' },
        )
        .build(),
      stuck: false,
    },
    {
      name: 'an init container waiting for its sandbox',
      pod: aPod()
        .named('a')
        .onNode('n1')
        .waitingSince(T0)
        .withContainers(
          { name: 'init', init: true, state: 'waiting', reason: 'ContainerCreating' },
          { name: 'app', init: false, state: 'waiting', reason: 'PodInitializing' },
        )
        .build(),
      stuck: true,
    },
  ];
  for (const { name, pod, stuck } of cases) {
    it(`${stuck ? 'reports' : 'ignores'} a pod ${name}`, () => {
      expect(stuckNames([pod], threshold + 1)).to.deep.equal(stuck ? ['a'] : []);
    });
  }

  it('counts the wait from scheduling, falling back to creation', () => {
    const scheduledLate = aPod()
      .named('late')
      .onNode('n1')
      .createdAt(T0)
      .waitingSince(secondsAfter(T0, 100))
      .build();
    const neverScheduledTime = aPod().named('created').onNode('n1').createdAt(T0).build();
    expect(stuckNames([scheduledLate, neverScheduledTime], 200)).to.deep.equal(['created']);
    expect(stuckNames([scheduledLate, neverScheduledTime], 280)).to.deep.equal(['late', 'created']);
  });

  it('treats the threshold as inclusive', () => {
    const pod = aPod().named('a').onNode('n1').waitingSince(T0).build();
    expect(stuckNames([pod], threshold - 0.001)).to.deep.equal([]);
    expect(stuckNames([pod], threshold)).to.deep.equal(['a']);
  });

  it('joins failure events by uid and takes the latest as the cause', () => {
    const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
    const events = indexFailureEvents([
      anEvent().about(pod).at(secondsAfter(T0, 10)).times(1).build(),
      anEvent().about(pod).saying(nameReservedMessage(pod)).at(secondsAfter(T0, 130)).times(7).build(),
    ]);
    const [stuck] = detectStuckPods([pod], events, at(200));
    expect(stuck).to.include({ cause: 'NameReserved', failureCount: 8, waitingReason: 'ContainerCreating' });
    expect(stuck?.lastFailureTime).to.deep.equal(secondsAfter(T0, 130));
    expect(stuck?.classification?.reservedFor).to.equal('ab'.repeat(32));
  });

  it('joins an event without an involved uid through the uid in the reserved name', () => {
    const pod = aPod().named('web-2').onNode('n1').waitingSince(T0).build();
    const events = indexFailureEvents([
      anEvent().aboutNameOnly(pod).saying(nameReservedMessage(pod)).build(),
    ]);
    expect(detectStuckPods([pod], events, at(200))[0]?.cause).to.equal('NameReserved');
  });

  it('does not join an event about an earlier pod with the same name', () => {
    const previous = aPod().named('db-0').build();
    const current = aPod().named('db-0').onNode('n1').waitingSince(T0).build();
    const events = indexFailureEvents([
      anEvent().about(previous).saying(nameReservedMessage(previous)).build(),
    ]);
    const [stuck] = detectStuckPods([current], events, at(200));
    expect(stuck).to.include({ cause: 'Unknown', failureCount: 0 });
  });

  it('ignores events that are not sandbox failures', () => {
    const pod = aPod().named('a').onNode('n1').waitingSince(T0).build();
    const events = indexFailureEvents([
      anEvent().about(pod).withReason('Scheduled').saying('assigned').build(),
    ]);
    expect(events.size).to.equal(0);
    expect(detectStuckPods([pod], events, at(200))[0]?.cause).to.equal('Unknown');
  });

  describe("counts only the word of the kubelet of the pod's own node", () => {
    const rows: {
      name: string;
      writtenBy: [string, string];
      counted: boolean;
      reason?: 'NotKubelet' | 'OtherNode';
    }[] = [
      { name: "the kubelet of the pod's node", writtenBy: ['kubelet', 'n1'], counted: true },
      {
        name: 'the kubelet of another node',
        writtenBy: ['kubelet', 'n2'],
        counted: false,
        reason: 'OtherNode',
      },
      {
        name: 'a kubelet that names no node',
        writtenBy: ['kubelet', ''],
        counted: false,
        reason: 'OtherNode',
      },
      {
        name: 'another component on the node',
        writtenBy: ['kwok', 'n1'],
        counted: false,
        reason: 'NotKubelet',
      },
      { name: 'a near-miss of the name', writtenBy: ['Kubelet', 'n1'], counted: false, reason: 'NotKubelet' },
      { name: 'no one', writtenBy: ['', ''], counted: false, reason: 'NotKubelet' },
    ];
    for (const row of rows)
      it(`${row.counted ? 'counts' : 'ignores'} an Event written by ${row.name}`, () => {
        const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
        const event = anEvent()
          .about(pod)
          .saying(nameReservedMessage(pod))
          .writtenBy(...row.writtenBy)
          .build();
        const [stuck] = detectStuckPods([pod], indexFailureEvents([event]), at(200));
        expect(stuck?.cause).to.equal(row.counted ? 'NameReserved' : 'Unknown');
        expect(stuck?.failureCount).to.equal(row.counted ? 1 : 0);
        expect(stuck?.ignoredEvents).to.deep.equal(
          row.reason
            ? [
                {
                  uid: event.uid,
                  reason: row.reason,
                  reportingController: row.writtenBy[0],
                  reportingInstance: row.writtenBy[1],
                },
              ]
            : undefined,
        );
      });

    it("takes the latest of the kubelet's Events, however late a forged one is dated", () => {
      const pod = aPod().named('web-1').onNode('n1').waitingSince(T0).build();
      const events = indexFailureEvents([
        anEvent().about(pod).saying(nameReservedMessage(pod)).at(secondsAfter(T0, 130)).build(),
        anEvent()
          .about(pod)
          .saying('failed to setup network for sandbox: failed to allocate for range 0')
          .writtenBy('kubelet', 'n2')
          .at(new Date('2099-01-01T00:00:00Z'))
          .build(),
      ]);
      const [stuck] = detectStuckPods([pod], events, at(200));
      expect(stuck).to.include({ cause: 'NameReserved', failureCount: 1 });
      expect(stuck?.ignoredEvents?.map((e) => e.reason)).to.deep.equal(['OtherNode']);
    });
  });
});
