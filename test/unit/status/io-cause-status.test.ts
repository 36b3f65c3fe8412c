// The ioCause a SandboxHealth shows: kept while the cause and its cast hold, so the agent's republished shares
// write nothing, but rewritten when a share crosses a band (never 60 % shown for a pod now at 30 %).
import { expect } from 'chai';
import type { IoAttribution, IoConsumer, SandboxHealthStatus } from '../../../src/api/v1alpha1/index.js';
import type { IoCauseDecision } from '../../../src/policy/io-cause.js';
import { desiredIoCause } from '../../../src/status/io-cause-status.js';
import { T0 } from '../../support/builders.js';

const pod = (name: string, sharePercent: number, role: IoConsumer['role']): IoConsumer => ({
  kind: 'Pod',
  podUid: `uid-${name}`,
  namespace: 'shop',
  name,
  sharePercent,
  role,
});
const attribution = (...consumers: IoConsumer[]): IoAttribution => ({
  confidence: 'High',
  confidenceReason: 'cgroup v2 with ext4',
  podsMeasured: consumers.length,
  consumers,
});
const decision: IoCauseDecision = { cause: 'Pod', message: 'shop/db-0 does it', culprits: [] };

/** The status after a first look, then what the next look makes of it. */
function twoLooks(first: IoAttribution, second: IoAttribution) {
  const stored = desiredIoCause({ decision, attribution: first }, undefined, undefined, T0);
  const previous = { ...stored } as SandboxHealthStatus; // the rest of a status does not matter here
  const next = desiredIoCause(
    { decision, attribution: second },
    previous,
    undefined,
    new Date(T0.getTime() + 10_000),
  );
  return { stored, next, kept: next.ioCause === stored.ioCause };
}

describe('desiredIoCause', () => {
  it('keeps the stored cause while the shares move within their bands', () => {
    const { kept } = twoLooks(
      attribution(pod('db-0', 60, 'Culprit'), pod('web', 10, 'Bystander')),
      attribution(pod('db-0', 63, 'Culprit'), pod('web', 8, 'Bystander')),
    );
    expect(kept).to.equal(true);
  });

  it('keeps it while Bystanders come onto the list and leave it', () => {
    const { kept } = twoLooks(
      attribution(pod('db-0', 60, 'Culprit'), pod('web', 3, 'Bystander')),
      attribution(pod('db-0', 60, 'Culprit'), pod('cron', 3, 'Bystander')),
    );
    expect(kept).to.equal(true);
  });

  it('writes anew when a share crosses a band past its exit: 60 % then 30 %, and says the new share', () => {
    const { next, kept } = twoLooks(
      attribution(pod('db-0', 60, 'Culprit')),
      attribution(pod('db-0', 30, 'Culprit')),
    );
    expect(kept).to.equal(false);
    expect(next.topConsumer).to.equal('shop/db-0 30%');
    expect(next.ioCause?.since, 'the same cause: its since holds').to.equal(T0.toISOString());
    expect(
      twoLooks(attribution(pod('db-0', 60, 'Culprit')), attribution(pod('db-0', 45, 'Culprit'))).kept,
      '45 %: above the 50 band exit (40)',
    ).to.equal(true);
  });

  it('writes anew when a role changes', () => {
    expect(
      twoLooks(
        attribution(pod('db-0', 60, 'Culprit'), pod('web', 3, 'Bystander')),
        attribution(pod('db-0', 60, 'Culprit'), pod('web', 3, 'Victim')),
      ).kept,
    ).to.equal(false);
  });
});
