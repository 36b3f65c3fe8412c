// Issue 40 §4: stamps name the object they were written on, so a manifest copied with our annotations is not ours.
import { expect } from 'chai';
import {
  readRolloutStamps,
  readStamps,
  rolloutStampAnnotations,
  stampAnnotations,
  type NodeStamps,
} from '../../../src/api/v1alpha1/index.js';

const strings = (a: Record<string, string | null>) =>
  Object.fromEntries(Object.entries(a).filter((e): e is [string, string] => e[1] !== null));

describe('ownership stamps name their object', () => {
  const stamps: NodeStamps = {
    policy: 'p',
    since: new Date('2026-12-01T00:00:00Z'),
    reason: 'stuck',
    cordoned: true,
    taintsBefore: ['dedicated', 'gpu'],
  };
  const rows: { name: string; on: string; annotations: Record<string, string>; ours: boolean }[] = [
    {
      name: 'written on it',
      on: 'uid-a',
      annotations: strings(stampAnnotations(stamps, 'uid-a')),
      ours: true,
    },
    {
      name: 'copied from another object',
      on: 'uid-b',
      annotations: strings(stampAnnotations(stamps, 'uid-a')),
      ours: false,
    },
    {
      name: 'written before uids were stamped',
      on: 'uid-b',
      annotations: Object.fromEntries(
        Object.entries(strings(stampAnnotations(stamps, 'uid-a'))).filter(
          ([k]) => !k.endsWith('remediated-uid'),
        ),
      ),
      ours: true,
    },
  ];
  for (const row of rows)
    it(`${row.ours ? 'reads' : 'does not read'} Node stamps ${row.name}`, () => {
      expect(readStamps(row.annotations, row.on) !== undefined).to.equal(row.ours);
    });

  it('keeps the fencing taints that were there before ours, and none for an unfenced node', () => {
    expect(readStamps(strings(stampAnnotations(stamps, 'u')), 'u')?.taintsBefore).to.deep.equal([
      'dedicated',
      'gpu',
    ]);
    expect(
      readStamps(strings(stampAnnotations({ ...stamps, taintsBefore: [] }, 'u')), 'u')?.taintsBefore,
    ).to.deep.equal([]);
    expect(
      stampAnnotations(undefined, 'u')['sandbox.remediator.io/remediated-uid'],
      'removed with the rest',
    ).to.equal(null);
  });

  it('reads rollout stamps only on the object they name', () => {
    const held = {
      policy: 'p',
      since: new Date(0),
      reason: 'RolloutQueued' as const,
      startedAt: new Date(0),
    };
    const annotations = strings(rolloutStampAnnotations(held, 'uid-web'));
    expect(readRolloutStamps(annotations, 'uid-web')?.policy).to.equal('p');
    expect(readRolloutStamps(annotations, 'uid-copy')).to.equal(undefined);
    expect(rolloutStampAnnotations(undefined, 'uid-web')['sandbox.remediator.io/paused-uid']).to.equal(null);
  });
});
