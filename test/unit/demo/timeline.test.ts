import type { CoreV1Event } from '@kubernetes/client-node';
import { expect } from 'chai';
import { buildTimeline, formatTimeline } from '../../../hack/demo/timeline.js';

const START = new Date('2026-12-01T10:00:00Z');
const at = (s: number) => new Date(START.getTime() + s * 1000);

function event(
  rv: number,
  second: number,
  reason: string,
  object: { kind: string; name: string; namespace?: string },
  { component = 'sandbox-remediator', count = 1 } = {},
): CoreV1Event {
  return {
    metadata: { name: `e${rv}`, resourceVersion: String(rv) },
    involvedObject: object,
    reason,
    message: `${reason} message`,
    source: { component },
    firstTimestamp: at(second),
    lastTimestamp: at(second),
    count,
  };
}
const node = { kind: 'Node', name: 'n1' };
const pod = (name: string) => ({ kind: 'Pod', name, namespace: 'demo' });

describe('demo timeline', () => {
  it("keeps the operator's Events and kubelet's first failure, with how many followed, and nothing from before", () => {
    const timeline = buildTimeline({
      since: at(0),
      events: [
        event(1, -30, 'Cordoned', node), // an earlier run
        // kubelet repeats its Event in place: the one written last is not the first.
        event(9, 2, 'FailedCreatePodSandBox', pod('a'), { component: 'kubelet', count: 4 }),
        event(5, 3, 'FailedCreatePodSandBox', pod('b'), { component: 'kubelet', count: 2 }),
        event(6, 3, 'Scheduled', pod('b'), { component: 'default-scheduler' }),
        event(10, 20, 'Cordoned', node),
        event(11, 21, 'EvictedStuckPod', pod('a')),
      ],
      actions: [],
      extra: [],
    });
    expect(timeline.map((e) => `${e.actor} ${e.object} ${e.reason}`)).to.deep.equal([
      'kubelet pod/demo/a FailedCreatePodSandBox',
      'operator node/n1 Cordoned',
      'operator pod/demo/a EvictedStuckPod',
    ]);
    expect(timeline[0]!.message).to.include('the first of 6 on 2 pod(s)');
  });

  it('adds the actions only the status tells, and the demo marks first within their second', () => {
    const timeline = buildTimeline({
      since: at(0),
      events: [event(10, 20, 'Cordoned', node)],
      actions: [
        // told by the Event above (within 2 s)
        {
          kind: 'Cordon',
          target: 'node/n1',
          time: at(20.4).toISOString(),
          outcome: 'Succeeded',
          reason: 'X',
        },
        // an Event that was lost
        {
          kind: 'Evict',
          target: 'pod/demo/a',
          time: at(21).toISOString(),
          outcome: 'Succeeded',
          reason: 'SandboxCreationStuckOnIo',
          message: 'evicted',
        },
      ],
      extra: [
        {
          time: at(20.9).toISOString(),
          actor: 'demo',
          object: 'node/n1',
          reason: 'IncidentEnded',
          message: '',
        },
        {
          time: at(20.1).toISOString(),
          actor: 'agent',
          object: 'sandboxhealth/n1',
          reason: 'Io',
          message: '',
        },
      ],
    });
    expect(timeline.map((e) => e.reason)).to.deep.equal([
      'Io',
      'IncidentEnded',
      'Cordoned',
      'Evict Succeeded',
    ]);
    expect(timeline[3]!.message).to.equal('evicted');
  });

  it("puts the demo's reactions after the operator's entries of their second, and prints whole seconds", () => {
    const mark = (second: number, reason: string, reaction?: boolean) => ({
      time: at(second).toISOString(),
      actor: 'demo',
      object: 'pod/demo/a',
      reason,
      message: '',
      ...(reaction ? { reaction } : {}),
    });
    const timeline = buildTimeline({
      since: at(0),
      events: [event(10, 40, 'MigratedIoHeavyPod', pod('a'))],
      actions: [],
      extra: [
        mark(40.9, 'ReplacementRunning', true),
        mark(40.6, 'LoadStopped', true),
        mark(40.2, 'LoadStarted'),
      ],
    });
    expect(timeline.map((e) => e.reason)).to.deep.equal([
      'LoadStarted',
      'MigratedIoHeavyPod',
      'LoadStopped',
      'ReplacementRunning',
    ]);
    // 40.6 s is in the Event's second: not rounded up to +00:41 after the Event's +00:40.
    expect(formatTimeline(timeline, START).match(/^\+\d\d:\d\d/gm)).to.deep.equal([
      '+00:40',
      '+00:40',
      '+00:40',
      '+00:40',
    ]);
  });

  it('prints the time since the start, aligned, cut to the width', () => {
    const text = formatTimeline(
      [
        {
          time: at(75).toISOString(),
          actor: 'operator',
          object: 'node/n1',
          reason: 'Cordoned',
          message: 'x'.repeat(300),
        },
      ],
      START,
      80,
    );
    const [header, line] = text.split('\n');
    expect(header).to.match(/^TIME\s+BY\s+OBJECT\s+REASON\s+MESSAGE$/);
    expect(line).to.match(/^\+01:15 {2}operator {2}node\/n1 +Cordoned +x+…$/);
    expect(line!.length).to.equal(80);
  });
});
