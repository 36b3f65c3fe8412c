// Issue 12, faults and bad input: Events and pods as odd as the API lets anyone write them, through detection.
import { expect } from 'chai';
import fc from 'fast-check';
import {
  classifyFailureMessage,
  detectNodeFindings,
  detectStuckPods,
  findPodOfEvent,
  indexFailureEvents,
  isSandboxFailureEvent,
  MAX_FAILURE_MESSAGE_CHARS,
  podUidOf,
  truncateFailureMessage,
  type EventView,
  type PodView,
} from '../../../src/detection/index.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../support/builders.js';

const threshold = 180;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const options = { stuckThresholdSeconds: threshold, now: secondsAfter(T0, 600) };
const IO_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded';

describe('detection on bad input', () => {
  describe('which pod an Event is about', () => {
    const pod = aPod().named('web-0', 'shop').onNode('n1').waitingSince(T0).build();
    const other = aPod().named('db-0', 'bank').onNode('n2').waitingSince(T0).build();
    const byUid = (uid: string) => [pod, other].find((p) => p.uid === uid);
    const cases: { name: string; event: EventView; about: PodView | undefined }[] = [
      { name: 'its uid, namespace and name', event: anEvent().about(pod).build(), about: pod },
      {
        name: "another namespace's pod by uid (a uid is only a string in an Event)",
        event: { ...anEvent().about(pod).build(), involvedUid: other.uid },
        about: undefined,
      },
      {
        name: 'an old pod of the same name (another uid)',
        event: anEvent().about(aPod().named('web-0', 'shop').build()).build(),
        about: undefined,
      },
      {
        name: 'no uid, and the reserved name in its message names it',
        event: anEvent().aboutNameOnly(pod).saying(nameReservedMessage(pod)).build(),
        about: pod,
      },
      {
        name: "no uid, and the reserved name in its message names another namespace's pod",
        event: anEvent().aboutNameOnly(pod).saying(nameReservedMessage(other)).build(),
        about: undefined,
      },
      {
        name: 'no uid and nothing in its message',
        event: anEvent().aboutNameOnly(pod).build(),
        about: undefined,
      },
      {
        name: 'no name or namespace',
        event: { ...anEvent().about(pod).build(), involvedName: '', involvedNamespace: '' },
        about: undefined,
      },
    ];
    for (const { name, event, about } of cases) {
      it(`${about ? 'finds' : 'finds no'} pod for an Event naming ${name}`, () => {
        expect(findPodOfEvent(event, byUid)).to.equal(about);
        const stuck = detectStuckPods([pod, other], indexFailureEvents([event]), options);
        const joined = stuck.filter((s) => s.failureCount > 0).map((s) => s.pod);
        expect(joined).to.deep.equal(about ? [about] : []);
      });
    }

    it('does not index an Event by a reserved name that is not its own pod', () => {
      const spoof = anEvent().aboutNameOnly(pod).saying(nameReservedMessage(other)).build();
      expect(podUidOf(spoof)).to.equal(undefined);
      expect([...indexFailureEvents([spoof]).keys()]).to.deep.equal([]);
    });
  });

  describe('messages', () => {
    // Regression: the rules' `.*` was quadratic in the length of the message; 200 KB took 5.8 s.
    it('classifies a 1 MB message built to make the rules backtrack in well under a second', () => {
      for (const unit of ['pull image ', 'plugin type="x', 'failed to reserve sandbox name "', 'x']) {
        const message = unit.repeat(Math.ceil(1_000_000 / unit.length));
        const started = performance.now();
        classifyFailureMessage(message);
        isSandboxFailureEvent({ involvedKind: 'Pod', reason: 'Failed', message: `Error: ${message}` });
        expect(performance.now() - started, unit).to.be.below(250);
      }
    });

    it('reads a cause in the head of a long message, and only in the head', () => {
      const filler = 'x'.repeat(MAX_FAILURE_MESSAGE_CHARS);
      expect(classifyFailureMessage(`${IO_MESSAGE} ${filler}`).cause).to.equal('DeadlineExceeded');
      expect(classifyFailureMessage(`${filler} ${IO_MESSAGE}`).cause).to.equal('Other');
    });

    it('cuts a message to at most the head, never through a surrogate pair', () => {
      const emoji = '\u{1F600}'; // two UTF-16 units
      const at = (units: number) => `${'a'.repeat(units)}${emoji}${'b'.repeat(5000)}`;
      expect(truncateFailureMessage(at(MAX_FAILURE_MESSAGE_CHARS - 1))).to.equal(
        'a'.repeat(MAX_FAILURE_MESSAGE_CHARS - 1),
      );
      expect(truncateFailureMessage(at(MAX_FAILURE_MESSAGE_CHARS - 2))).to.equal(
        `${'a'.repeat(MAX_FAILURE_MESSAGE_CHARS - 2)}${emoji}`,
      );
      fc.assert(
        fc.property(
          fc.string({ unit: 'grapheme', maxLength: 50 }),
          fc.nat(MAX_FAILURE_MESSAGE_CHARS),
          (tail, pad) => {
            const message = `${'a'.repeat(pad)}${tail}`.repeat(3);
            const head = truncateFailureMessage(message);
            expect(head.length).to.be.at.most(MAX_FAILURE_MESSAGE_CHARS);
            expect(message.startsWith(head)).to.equal(true);
            expect(LONE_SURROGATE.test(head), 'a lone surrogate at the cut').to.equal(false);
          },
        ),
        { numRuns: 300 },
      );
    });

    it('keeps control characters in a message: they are data, and classify like any other', () => {
      const pod = aPod().onNode('n1').waitingSince(T0).build();
      const message = `\u0000\u001b[31m${IO_MESSAGE}\r\n\u0007`;
      const [stuck] = detectStuckPods(
        [pod],
        indexFailureEvents([anEvent().about(pod).saying(message).build()]),
        options,
      );
      expect(stuck).to.include({ cause: 'DeadlineExceeded', lastMessage: message });
    });
  });

  describe('counts and times', () => {
    const pod = aPod().onNode('n1').waitingSince(T0).build();
    const countOf = (...counts: number[]) =>
      detectStuckPods(
        [pod],
        indexFailureEvents(counts.map((c) => anEvent().about(pod).times(c).build())),
        options,
      )[0]?.failureCount;

    // Regression: two Events of count 1e308 summed to Infinity, which no status can hold (failureCount is an int).
    it('sums counts to a finite integer, an Event standing for at least one occurrence', () => {
      expect(countOf(1e308, 1e308)).to.equal(2); // no count the API can hold: each stands for one
      expect(countOf(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)).to.equal(Number.MAX_SAFE_INTEGER);
      expect(countOf(0, -5, Number.NaN, 2.5)).to.equal(4);
      expect(countOf(3, 4)).to.equal(7);
    });

    it('takes the latest Event by time for the cause, whatever the times', () => {
      const at = (time: Date, message: string) => anEvent().about(pod).at(time).saying(message).build();
      const events = [
        at(new Date(0), 'failed to setup network for sandbox'),
        at(new Date('9999-12-31T23:59:59Z'), IO_MESSAGE),
        at(new Date(Number.NaN), 'failed to pull image "x"'),
      ];
      expect(detectStuckPods([pod], indexFailureEvents(events), options)[0]?.cause).to.equal(
        'DeadlineExceeded',
      );
    });

    it('never counts a pod whose wait began at an invalid time as stuck', () => {
      const invalid = aPod().onNode('n1').createdAt(new Date(Number.NaN)).build();
      expect(detectStuckPods([invalid], new Map(), options)).to.deep.equal([]);
    });
  });

  describe('properties', () => {
    const NODES = ['n1', 'n2', 'node-a.example'];
    // Valid node names, and names no node can have: case, spaces, paths, unicode, too long, empty.
    const nodeName = fc.oneof(
      fc.constantFrom(...NODES),
      fc.constantFrom(
        'N1',
        'n1 ',
        ' n1',
        '../n1',
        'n1/..',
        'ｎ1',
        'n\u200b1',
        '',
        'n'.repeat(300),
        'n1\u0000',
      ),
      fc.string({ maxLength: 40 }),
    );
    const name = fc.oneof(fc.constantFrom('a', 'b', 'web-0'), fc.string({ maxLength: 10 }));
    const namespace = fc.oneof(fc.constantFrom('default', 'other'), fc.string({ maxLength: 10 }));
    const uid = fc.constantFrom('u1', 'u2', 'u3', 'u4', '');
    const date = fc.oneof(
      fc.date({ min: new Date(0), max: new Date('9999-12-31T23:59:59Z') }),
      fc.constant(new Date(Number.NaN)),
    );
    const pod: fc.Arbitrary<PodView> = fc
      .record({
        uid,
        name,
        namespace,
        nodeName: fc.option(nodeName, { nil: undefined }),
        phase: fc.constantFrom('Pending', 'Running', 'Failed', ''),
        createdAt: date,
        deleting: fc.boolean(),
        reason: fc.constantFrom('ContainerCreating', 'PodInitializing', 'CrashLoopBackOff', undefined),
      })
      .map(({ nodeName: node, reason, ...p }) => ({
        ...p,
        ...(node === undefined ? {} : { nodeName: node }),
        labels: {},
        containers: [{ name: 'app', init: false, state: 'waiting' as const, ...(reason ? { reason } : {}) }],
      }));
    const event: fc.Arbitrary<EventView> = fc
      .record({
        uid: fc.string({ maxLength: 4 }),
        type: fc.constantFrom('Warning', 'Normal'),
        reason: fc.constantFrom('FailedCreatePodSandBox', 'Failed', 'Scheduled', ''),
        message: fc.oneof(
          fc.constantFrom(
            IO_MESSAGE,
            'Error: context deadline exceeded',
            'failed to setup network for sandbox',
          ),
          fc.string({ maxLength: 80 }),
        ),
        involvedKind: fc.constantFrom('Pod', 'Node', ''),
        involvedNamespace: namespace,
        involvedName: name,
        involvedUid: fc.option(uid, { nil: undefined }),
        count: fc.oneof(fc.integer(), fc.double()),
        lastTime: date,
        reportingController: fc.constantFrom('kubelet', 'Kubelet', 'kubelet ', 'kwok', ''),
        reportingInstance: nodeName,
      })
      .map(({ involvedUid, ...e }) => (involvedUid === undefined ? e : { ...e, involvedUid }));

    it('never throws, joins an Event only to the pod it names, and finds no pod on a node it is not on', () => {
      fc.assert(
        fc.property(
          fc.array(pod, { maxLength: 12 }),
          fc.array(event, { maxLength: 30 }),
          fc.integer({ min: 1, max: 3 }),
          (pods, events, minStuckPods) => {
            // Messages tell the Events apart, so a stuck pod's message shows which Event was joined to it.
            const tagged = events.map((e, i) => ({ ...e, message: `${e.message} #${i}` }));
            const stuck = detectStuckPods(pods, indexFailureEvents(tagged), options);
            for (const s of stuck) {
              expect(Number.isSafeInteger(s.failureCount) && s.failureCount >= 0).to.equal(true);
              expect(Number.isFinite(s.waitedSeconds)).to.equal(true);
              expect(s.nodeName).to.equal(s.pod.nodeName);
              if (s.lastMessage === undefined) continue;
              const source = tagged.find((e) => e.message === s.lastMessage);
              expect(source, 'the joined Event').to.not.equal(undefined);
              expect([source?.involvedNamespace, source?.involvedName]).to.deep.equal([
                s.pod.namespace,
                s.pod.name,
              ]);
              expect(source && podUidOf(source)).to.equal(s.pod.uid);
              expect(source && isSandboxFailureEvent(source)).to.equal(true);
              expect(source?.reportingController, 'written by the kubelet').to.equal('kubelet');
              expect(source?.reportingInstance, "of the pod's own node").to.equal(s.pod.nodeName);
            }
            for (const s of stuck)
              for (const ignored of s.ignoredEvents ?? []) {
                const { reportingController, reportingInstance } = ignored;
                expect(
                  reportingController !== 'kubelet' || reportingInstance !== s.pod.nodeName,
                  'only an Event of another author is ignored',
                ).to.equal(true);
              }
            const findings = detectNodeFindings(stuck, NODES, minStuckPods);
            expect([...findings.keys()].sort()).to.deep.equal([...NODES].sort());
            for (const [node, finding] of findings) {
              for (const s of finding.stuckPods) expect(s.pod.nodeName).to.equal(node);
              const expected = stuck.filter((s) => s.pod.nodeName === node).length;
              expect(finding.stuckPods.length).to.equal(expected);
              expect(finding.degraded).to.equal(expected >= minStuckPods);
            }
          },
        ),
        { numRuns: 500 },
      );
    });
  });
});
