// cleanup's last step: the IO-limit stamps taken off each pod whose limit is no longer held, kept on one whose node's
// SandboxHealth still wants or holds its limit (or does not parse), and one line said for each.
import { expect } from 'chai';
import type { AppliedIoLimitStatus, WantedIoLimitSpec } from '../../../src/api/v1alpha1/index.js';
import { IO_LIMIT_UNSTAMPED } from '../../../src/api/v1alpha1/index.js';
import type { HealthLeftover } from '../../../src/cleanup/plan.js';
import { planUnstamp, runUnstamp, type StampedPodView } from '../../../src/cleanup/pod-stamps.js';
import type { PodRef } from '../../../src/policy/actions.js';

const pod = (uid: string, nodeName = 'n1'): StampedPodView => ({
  namespace: 'shop',
  name: `db-${uid}`,
  uid,
  nodeName,
  policy: 'p',
  limit: '8:0 wbps=4194304',
});
const entry = { podUid: 'a' } as WantedIoLimitSpec;
const record = { podUid: 'a' } as AppliedIoLimitStatus;

describe('cleanup: the IO-limit stamps off the pods', () => {
  const table: { name: string; health?: HealthLeftover; unstamped: boolean }[] = [
    { name: 'no SandboxHealth left on its node', unstamped: true },
    {
      name: 'a SandboxHealth that holds nothing of it',
      health: { name: 'n1', applied: [{ ...record, podUid: 'b' }] },
      unstamped: true,
    },
    { name: 'its limit still wanted', health: { name: 'n1', ioLimits: [entry] }, unstamped: false },
    {
      name: 'its limit still in force (the agent has not reported it lifted)',
      health: { name: 'n1', applied: [record] },
      unstamped: false,
    },
    {
      name: 'a SandboxHealth whose limits do not parse',
      health: { name: 'n1', unreadableLimits: true },
      unstamped: false,
    },
  ];
  for (const row of table)
    it(row.name, () => {
      const plan = planUnstamp([pod('a')], row.health ? [row.health] : []);
      expect(plan.unstamp.map((p) => p.uid)).to.deep.equal(row.unstamped ? ['a'] : []);
      expect(plan.leftAlone.map((l) => l.target)).to.deep.equal(row.unstamped ? [] : ['pod/shop/db-a']);
    });

  it('reads a SandboxHealth by the node it is about, not by its own name alone', () => {
    const plan = planUnstamp(
      [pod('a', 'worker-1')],
      [{ name: 'n1', nodeName: 'worker-1', applied: [record] }],
    );
    expect(plan.leftAlone[0]?.why).to.match(
      /^kept its IO-limit stamps \(8:0 wbps=4194304\): sandboxhealth\/n1 still holds/,
    );
  });

  it('says each pod: unstamped, gone meanwhile, failed, left alone; and counts them', async () => {
    const written: { pod: PodRef; annotations: unknown }[] = [];
    const out: string[] = [];
    const outcome = await runUnstamp(
      { unstamp: [pod('a'), pod('b'), pod('c')], leftAlone: [{ target: 'pod/shop/db-d', why: 'kept' }] },
      {
        writer: {
          dryRun: false,
          stampPod: (p, annotations) => {
            written.push({ pod: p, annotations });
            if (p.uid === 'c') return Promise.reject(new Error('refused'));
            return Promise.resolve(p.uid === 'a');
          },
        },
        out: { write: (t: string) => out.push(t) },
        describeError: (e) => (e as Error).message,
      },
    );
    expect(written.map((w) => w.annotations)).to.deep.equal([
      IO_LIMIT_UNSTAMPED,
      IO_LIMIT_UNSTAMPED,
      IO_LIMIT_UNSTAMPED,
    ]);
    expect(out).to.deep.equal([
      'Unstamped pod/shop/db-a: IO-limit stamps of policy p (8:0 wbps=4194304) removed\n',
      'Skipped pod/shop/db-b: gone meanwhile\n',
      'Failed pod/shop/db-c: refused\n',
      'Left alone pod/shop/db-d: kept\n',
    ]);
    expect(outcome).to.deep.equal({ done: 1, failed: 1, leftAlone: 1 });
  });
});
