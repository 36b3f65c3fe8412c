import { expect } from 'chai';
import { detectStuckPods, indexFailureEvents, type EventView } from '../../../../src/detection/index.js';
import { IgnoredEvents } from '../../../../src/controllers/sandboxpolicy/ignored-events.js';
import type { Logger } from '../../../../src/observability/log.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';

function recording() {
  const warnings: { message: string; fields: Record<string, unknown> | undefined }[] = [];
  const logger: Logger = {
    error: () => undefined,
    info: () => undefined,
    debug: () => undefined,
    warn: (message, fields) => warnings.push({ message, fields }),
  };
  const counted: string[] = [];
  const ignored = new IgnoredEvents(logger, { onIgnoredEvent: (reason) => counted.push(reason) });
  return { warnings, counted, ignored };
}

describe('IgnoredEvents', () => {
  const pod = aPod().named('web-1', 'shop').onNode('n1').waitingSince(T0).build();
  const genuine = anEvent().about(pod).saying(nameReservedMessage(pod)).build();
  const forged = anEvent().about(pod).saying(nameReservedMessage(pod)).writtenBy('kubelet', 'n2').build();
  const other = anEvent().about(pod).writtenBy('tenant-bot', 'n1').build();
  const look = (events: EventView[]) =>
    detectStuckPods([pod], indexFailureEvents(events), {
      stuckThresholdSeconds: 0,
      now: secondsAfter(T0, 1),
    });

  it('counts each ignored Event once and logs each pod once, however many passes see them', () => {
    const { warnings, counted, ignored } = recording();
    ignored.note(look([genuine, forged]));
    ignored.note(look([genuine, forged]));
    expect(counted).to.deep.equal(['OtherNode']);
    expect(warnings).to.have.length(1);
    expect(warnings[0]?.fields).to.deep.include({
      pod: 'shop/web-1',
      node: 'n1',
      writtenBy: ['kubelet@n2'],
      reasons: ['OtherNode'],
    });
    ignored.note(look([genuine, forged, other]));
    expect(counted, 'a new Event about the same pod is counted').to.deep.equal(['OtherNode', 'NotKubelet']);
    expect(warnings, 'and not logged again').to.have.length(1);
  });

  it("tells nothing of a pod whose Events are all the kubelet's", () => {
    const { warnings, counted, ignored } = recording();
    ignored.note(look([genuine]));
    expect([warnings, counted]).to.deep.equal([[], []]);
  });
});
