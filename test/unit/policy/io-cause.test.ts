import { expect } from 'chai';
import type { IoAttribution, IoConsumer } from '../../../src/api/v1alpha1/index.js';
import { decideIoCause, topConsumer } from '../../../src/policy/io-cause.js';

const pod = (
  name: string,
  share: number | undefined,
  role: IoConsumer['role'] = 'Bystander',
): IoConsumer => ({
  kind: 'Pod',
  podUid: `uid-${name}`,
  namespace: 'shop',
  name,
  ...(share !== undefined ? { sharePercent: share } : {}),
  role,
});
const runtime = (share: number): IoConsumer => ({ kind: 'Runtime', sharePercent: share, role: 'Runtime' });
const system = (share: number): IoConsumer => ({ kind: 'System', sharePercent: share, role: 'System' });
const attribution = (...consumers: IoConsumer[]): IoAttribution => ({
  cgroupVersion: 'v2',
  device: 'sda',
  deviceNumber: '8:0',
  confidence: 'High',
  confidenceReason: 'cgroup v2, ext4',
  podsMeasured: consumers.length,
  consumers,
});

/** A saturated sda (95 % busy, threshold 90 %) and a minSharePercent. */
const saturated = (minSharePercent = 25, held: string[] = []) => ({
  minSharePercent,
  busyPercent: 95,
  busyThreshold: 90,
  held: new Set(held),
});

describe('decideIoCause', () => {
  const rows: { name: string; attribution: IoAttribution | undefined; cause: string; culprits: string[] }[] =
    [
      { name: 'no attribution: Unknown', attribution: undefined, cause: 'Unknown', culprits: [] },
      {
        name: 'pressure alone (the kubelet Summary): Unknown, it can tell victims, not culprits',
        attribution: attribution(pod('db-0', undefined, 'Victim')),
        cause: 'Unknown',
        culprits: [],
      },
      {
        name: 'a pod at 25 % or more: Pod, each such pod a culprit, biggest first',
        attribution: attribution(pod('web', 30), pod('db-0', 64), runtime(4), system(2)),
        cause: 'Pod',
        culprits: ['db-0', 'web'],
      },
      {
        name: "the runtime's own IO at 25 % or more and above every pod's: Runtime, no culprit",
        attribution: attribution(pod('web', 20), runtime(70), system(10)),
        cause: 'Runtime',
        culprits: [],
      },
      {
        name: 'a pod above the runtime, both over 25 %: Pod',
        attribution: attribution(pod('db-0', 50), runtime(40), system(10)),
        cause: 'Pod',
        culprits: ['db-0'],
      },
      {
        name: 'a Victim at 25 % (its own pressure high) is never a culprit: the one below it is',
        attribution: attribution(pod('v', 30, 'Victim'), pod('db-0', 26), system(44)),
        cause: 'Pod',
        culprits: ['db-0'],
      },
      {
        name: 'nothing reaches 25 %: Unattributed',
        attribution: attribution(pod('a', 20), pod('b', 15), runtime(5), system(60)),
        cause: 'Unattributed',
        culprits: [],
      },
    ];
  for (const row of rows)
    it(row.name, () => {
      const decision = decideIoCause(row.attribution, saturated());
      expect(decision.cause).to.equal(row.cause);
      expect(decision.culprits.map((c) => c.name)).to.deep.equal(row.culprits);
      expect(decision.message).to.be.a('string').and.not.equal('');
    });

  it('names the culprits and the device in its message, and says how much to trust it', () => {
    const { message } = decideIoCause(attribution(pod('db-0', 64), system(36)), saturated());
    expect(message).to.equal(
      "shop/db-0 does 64% of sda's IO: the culprit is moved where migrateWorkloads.by measuredIo allows it (High confidence: cgroup v2, ext4).",
    );
  });

  it('says the culprit is limited in place first where the policy limits IO', () => {
    const { message } = decideIoCause(attribution(pod('db-0', 64), system(36)), {
      ...saturated(),
      limitsIo: true,
    });
    expect(message).to.equal(
      "shop/db-0 does 64% of sda's IO: the culprit is limited in place (limitIo), and moved only if that limit is exhausted or not applied and migrateWorkloads.by measuredIo allows it (High confidence: cgroup v2, ext4).",
    );
  });

  it('honours minSharePercent', () => {
    expect(decideIoCause(attribution(pod('db-0', 40), system(60)), saturated(50)).cause).to.equal(
      'Unattributed',
    );
    expect(decideIoCause(attribution(pod('db-0', 40), system(60)), saturated(40)).cause).to.equal('Pod');
  });

  it('keeps a culprit of the last look one down to 80 % of minSharePercent, and no one else', () => {
    const look = attribution(pod('db-0', 21), pod('web', 22), system(57));
    expect(decideIoCause(look, saturated(25, ['uid-db-0'])).culprits.map((c) => c.name)).to.deep.equal([
      'db-0',
    ]);
    expect(
      decideIoCause(attribution(pod('db-0', 19.9), system(80.1)), saturated(25, ['uid-db-0'])).cause,
    ).to.equal('Unattributed');
  });

  it('names nobody on a device that is not saturated in the same reading: the pressure comes from elsewhere', () => {
    const look = attribution(pod('logs', 70), runtime(20), system(10));
    for (const busyPercent of [4, 89.9, undefined]) {
      const decision = decideIoCause(look, { ...saturated(), busyPercent });
      expect(decision.cause, String(busyPercent)).to.equal('Unattributed');
      expect(decision.culprits).to.deep.equal([]);
      expect(decision.message).to.match(/under diskBusyPercent \(90%\)/);
    }
    expect(decideIoCause(look, { ...saturated(), busyPercent: 90 }).cause).to.equal('Pod');
  });
});

describe('topConsumer', () => {
  it('is the biggest share with its name, an unresolved pod by UID, the runtime and the rest by kind', () => {
    expect(topConsumer(attribution(pod('db-0', 64), system(36)))).to.equal('shop/db-0 64%');
    expect(
      topConsumer(attribution({ kind: 'Pod', podUid: 'u-1', sharePercent: 51.4, role: 'Culprit' })),
    ).to.equal('u-1 51%');
    expect(topConsumer(attribution(pod('a', 10), runtime(80)))).to.equal('runtime 80%');
    expect(topConsumer(attribution(pod('a', 10), system(90)))).to.equal('system 90%');
    expect(topConsumer(attribution(pod('a', undefined)))).to.equal(undefined);
    expect(topConsumer(undefined)).to.equal(undefined);
  });
});
