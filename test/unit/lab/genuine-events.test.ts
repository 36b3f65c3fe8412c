// Issue 15: the Events a real kubelet wrote from a real containerd on the lab node (make lab; captured by
// `LAB_CAPTURE=... make test-lab` into test/fixtures/lab/captured.json with the component versions). The classifier
// reads them as the operator must, and the injector that the kwok tests use writes the same messages, in the same
// order, with the same Event fields.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  attemptMessage,
  DEADLINE_MESSAGE,
  DEFAULT_MESSAGE,
  eventName,
  renderMessage,
} from '../../../hack/cluster/incident.js';
import { classifyFailureMessage } from '../../../src/detection/classify.js';
import { REPO_ROOT } from '../../support/manifests.js';

interface CapturedEvent {
  message: string;
  count: number;
  type: string;
  reason: string;
  firstTimestamp: string;
  source: { component: string; host: string };
  reportingComponent: string;
  reportingInstance: string;
  metadata: { name: string };
  involvedObject: { kind: string; name: string; namespace: string; uid: string };
}
const captured = JSON.parse(readFileSync(join(REPO_ROOT, 'test/fixtures/lab/captured.json'), 'utf8')) as {
  versions: Record<string, string>;
  delay: CapturedEvent[];
  stall: CapturedEvent[];
  io: CapturedEvent[];
};
const RESERVED = /is reserved for "([0-9a-f]{64})"$/;

describe('the genuine kubelet Events from the lab node', () => {
  it('come from the versions recorded with them', () => {
    expect(captured.versions.containerRuntime).to.match(/^containerd:\/\/1\.6\.\d+/);
    expect(captured.versions.kubelet).to.match(/^v1\.\d+\.\d+$/);
  });

  for (const mode of ['stall', 'io'] as const) {
    it(`${mode}: the first attempt timed out, later ones met the reserved name, each message an Event of its own`, () => {
      const events = captured[mode];
      // The first Event is the deadline; the others are the deadline (an attempt that timed out again: the io
      // capture has it twice) or the reserved name, each distinct message once.
      expect(events[0]!.message).to.equal(DEADLINE_MESSAGE);
      expect(new Set(events.map((e) => e.message)).size).to.equal(events.length);
      const reservedEvents = events.filter((e) => e.message !== DEADLINE_MESSAGE);
      expect(reservedEvents, 'the lab captured the reserved name under this mode').to.not.be.empty;
      for (const reserved of reservedEvents) {
        const { name, namespace, uid } = reserved.involvedObject;
        const holder = RESERVED.exec(reserved.message)?.[1];
        expect(holder, reserved.message).to.be.a('string');
        // The injector's template renders the genuine text exactly.
        expect(renderMessage(DEFAULT_MESSAGE, { name, namespace, uid }, holder!)).to.equal(reserved.message);
        // And the operator reads it as containerd's name reservation, with the name and holder.
        const classified = classifyFailureMessage(reserved.message);
        expect(classified.cause).to.equal('NameReserved');
        expect(classified.runtime).to.equal('containerd');
        expect(classified.name).to.deep.include({ pod: name, namespace, uid, attempt: 0 });
        expect(classified.reservedFor).to.equal(holder);
      }
      expect(classifyFailureMessage(events[0]!.message).cause).to.equal('DeadlineExceeded');
    });
  }

  it('delay: a cancellable delay gives only the deadline, however many attempts', () => {
    expect(captured.delay.map((e) => e.message)).to.deep.equal([DEADLINE_MESSAGE]);
    expect(captured.delay[0]!.count).to.be.at.least(3);
  });

  it("the injector's attempts follow kubelet's: the deadline first, then the reservation; other messages repeat", () => {
    expect([1, 2, 3].map((n) => attemptMessage(DEFAULT_MESSAGE, n))).to.deep.equal([
      DEADLINE_MESSAGE,
      DEFAULT_MESSAGE,
      DEFAULT_MESSAGE,
    ]);
    const cni =
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox';
    expect([1, 2].map((n) => attemptMessage(cni, n))).to.deep.equal([cni, cni]);
  });

  it("the injector names Events as kubelet's recorder does: <pod>.<hex of the time in nanoseconds>", () => {
    for (const e of [...captured.stall, ...captured.io, ...captured.delay]) {
      const [pod, kubelets] = e.metadata.name.split('.') as [string, string];
      expect(pod).to.equal(e.involvedObject.name);
      // The injector's name for the Event's first second: the same form, and within that second of kubelet's.
      const [ours, injectors] = eventName(pod, new Date(Date.parse(e.firstTimestamp))).split('.') as [
        string,
        string,
      ];
      expect(ours).to.equal(pod);
      expect(injectors).to.match(/^[0-9a-f]+$/);
      const ms = (hex: string) => Number(BigInt(`0x${hex}`) / 1_000_000n);
      expect(Math.abs(ms(kubelets) - ms(injectors))).to.be.below(1000);
    }
  });

  it("carry the fields the injector writes: a kubelet Warning from the node, and the pod's uid", () => {
    for (const e of [...captured.stall, ...captured.io, ...captured.delay]) {
      expect(e).to.deep.include({
        type: 'Warning',
        reason: 'FailedCreatePodSandBox',
        reportingComponent: 'kubelet',
        reportingInstance: e.source.host,
        source: { component: 'kubelet', host: e.source.host },
      });
      expect(e.involvedObject.kind).to.equal('Pod');
      expect(e.involvedObject.uid).to.match(/^[0-9a-f-]{36}$/);
    }
  });
});
