// The stamps on the pods a node's IO limits are about (limitIo): what a pod carries for its entries, and what to write
// as the list changes. A table, and a property over any sequence of lists: the pods carry exactly their entries' stamps.
import { expect } from 'chai';
import fc from 'fast-check';
import {
  IO_LIMIT_STAMP,
  IO_LIMIT_UNSTAMPED,
  type WantedIoLimitSpec,
} from '../../../src/api/v1alpha1/index.js';
import {
  ioLimitStamps,
  ioMaxLine,
  stampChanges,
  type StampedPod,
} from '../../../src/policy/io-limit-stamp.js';
import { mergeAnnotations } from '../../support/memory-cluster.js';

const entry = (uid: string, over: Partial<WantedIoLimitSpec> = {}): WantedIoLimitSpec => ({
  podUid: uid,
  pod: `shop/${uid}`,
  device: '8:0',
  limit: { wbps: 4_194_304, wiops: 200 },
  policy: 'p',
  since: '2026-12-06T10:00:00.000Z',
  ...over,
});

/** What the operator last wrote on each pod, as act() keeps it. */
function ledger(list: WantedIoLimitSpec[], gone: string[] = []): Map<string, StampedPod> {
  const stamped = new Map<string, StampedPod>();
  for (const e of list)
    stamped.set(e.podUid, {
      namespace: 'shop',
      name: e.podUid,
      uid: e.podUid,
      node: 'n1',
      stamps: ioLimitStamps(
        list.filter((o) => o.podUid === e.podUid),
        e.podUid,
      ),
    });
  for (const uid of gone)
    stamped.set(uid, { namespace: 'shop', name: uid, uid, node: 'n1', stamps: undefined });
  return stamped;
}

describe('IO-limit stamps: what a limited pod carries', () => {
  it("says the limit as io.max's line, with the keys it sets in io.max's order", () => {
    expect(ioMaxLine('8:0', { wiops: 200, rbps: 'max', wbps: 4_194_304 })).to.equal(
      '8:0 rbps=max wbps=4194304 wiops=200',
    );
  });

  it("names every policy and device of the pod's entries, and the first since", () => {
    const stamps = ioLimitStamps(
      [
        entry('a', {
          device: '259:0',
          policy: 'q',
          since: '2026-12-06T11:00:00.000Z',
          limit: { rbps: 1024 },
        }),
        entry('a'),
      ],
      'a',
    );
    expect(stamps).to.deep.equal({
      [IO_LIMIT_STAMP.policy]: 'p,q',
      [IO_LIMIT_STAMP.limit]: '259:0 rbps=1024; 8:0 wbps=4194304 wiops=200',
      [IO_LIMIT_STAMP.since]: '2026-12-06T10:00:00.000Z',
      [IO_LIMIT_STAMP.uid]: 'a',
    });
  });
});

describe('IO-limit stamps: what to write as the list changes', () => {
  const table: {
    name: string;
    list: WantedIoLimitSpec[];
    /** The list as read, before this pass's write (absent: as `list`). */
    read?: WantedIoLimitSpec[];
    /** The pods the agent reports a limit in force on (absent: none). */
    held?: string[];
    before: Map<string, StampedPod>;
    want: { uid: string; stamped: boolean }[];
  }[] = [
    {
      name: 'a new limit: its pod stamped',
      list: [entry('a')],
      before: ledger([]),
      want: [{ uid: 'a', stamped: true }],
    },
    { name: 'the same limit: nothing written', list: [entry('a')], before: ledger([entry('a')]), want: [] },
    {
      name: 'a step: the stamp follows it',
      list: [entry('a', { limit: { wbps: 2_097_152 } })],
      before: ledger([entry('a')]),
      want: [{ uid: 'a', stamped: true }],
    },
    {
      name: 'a lift: the stamps off',
      list: [],
      before: ledger([entry('a')]),
      want: [{ uid: 'a', stamped: false }],
    },
    { name: 'a pod found gone: not written again', list: [entry('a')], before: ledger([], ['a']), want: [] },
    {
      name: 'a gone pod no longer listed: nothing to take off',
      list: [],
      before: ledger([], ['a']),
      want: [],
    },
    {
      name: 'a lift by a restarted operator, which never stamped the pod: the stamps off all the same',
      list: [],
      read: [entry('a')],
      before: ledger([]),
      want: [{ uid: 'a', stamped: false }],
    },
    {
      name: 'a lift of a pod found gone: nothing to take off',
      list: [],
      read: [entry('a')],
      before: ledger([], ['a']),
      want: [],
    },
    {
      name: 'a lift the agent has not reported done: the stamps stay',
      list: [],
      read: [entry('a')],
      held: ['a'],
      before: ledger([entry('a')]),
      want: [],
    },
    {
      name: 'a lift not yet done, seen by a restarted operator: stamped from the list as read, to be taken off after',
      list: [],
      read: [entry('a')],
      held: ['a'],
      before: ledger([]),
      want: [{ uid: 'a', stamped: true }],
    },
    {
      name: 'the agent reports the lift done: the stamps off',
      list: [],
      read: [],
      before: ledger([entry('a')]),
      want: [{ uid: 'a', stamped: false }],
    },
    {
      name: 'an entry whose pod name does not parse: not written',
      list: [entry('a', { pod: 'no-namespace' })],
      before: ledger([]),
      want: [],
    },
  ];
  for (const row of table)
    it(row.name, () => {
      const changes = stampChanges({
        node: 'n1',
        list: row.list,
        read: row.read ?? row.list,
        held: new Set(row.held),
        stamped: row.before,
      });
      expect(
        changes.map((c) => ({ uid: c.pod.uid, stamped: c.annotations !== IO_LIMIT_UNSTAMPED })),
      ).to.deep.equal(row.want);
      for (const c of changes) expect(c).to.include({ node: 'n1' });
    });

  // One gap, by design: an operator restarted while a lift is not yet reported done, the pod no longer in the list as
  // read, does not know the pod (the report names it by UID alone); cleanup takes that stamp off. Such pods are not
  // asserted on until they are listed again.
  it("any lists, restarts and lifts not yet done: every listed pod carries its entries' stamps, and a pod with no limit of ours none", () => {
    const uids = ['a', 'b', 'c'];
    const anEntry = fc.record({
      uid: fc.constantFrom(...uids),
      device: fc.constantFrom('8:0', '259:0'),
      wbps: fc.integer({ min: 1, max: 1e9 }),
      policy: fc.constantFrom('p', 'q'),
    });
    const aList = fc
      .array(anEntry, { maxLength: 4 })
      .map((es) =>
        [...new Map(es.map((e) => [`${e.uid} ${e.device}`, e])).values()].map((e) =>
          entry(e.uid, { device: e.device, policy: e.policy, limit: { wbps: e.wbps } }),
        ),
      );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(aList, fc.boolean(), fc.subarray(uids)), { minLength: 1, maxLength: 8 }),
        (steps) => {
          const onPods = new Map<string, Record<string, string>>(); // the API's pods' annotations
          const stamped = new Map<string, StampedPod>();
          let read: WantedIoLimitSpec[] = [];
          const lost = new Set<string>();
          for (const [list, restarted, lifting] of steps) {
            if (restarted) {
              stamped.clear(); // a new operator: it knows nothing it wrote
              for (const [uid, on] of onPods)
                if (Object.keys(on).length > 0 && !read.some((e) => e.podUid === uid)) lost.add(uid);
            }
            // Of the pods the list no longer names, those whose lift the agent has not reported yet.
            const held = new Set(lifting.filter((uid) => read.some((e) => e.podUid === uid)));
            for (const { pod, annotations } of stampChanges({ node: 'n1', list, read, held, stamped })) {
              onPods.set(pod.uid, mergeAnnotations(onPods.get(pod.uid), annotations));
              if (annotations === IO_LIMIT_UNSTAMPED) stamped.delete(pod.uid);
              else stamped.set(pod.uid, { ...pod, node: 'n1', stamps: annotations });
            }
            for (const uid of uids) {
              const entries = list.filter((e) => e.podUid === uid);
              if (entries.length > 0) lost.delete(uid);
              if (lost.has(uid)) continue;
              if (entries.length > 0) expect(onPods.get(uid), uid).to.deep.equal(ioLimitStamps(entries, uid));
              else if (held.has(uid))
                expect(onPods.get(uid) ?? {}, `${uid} still limited`).to.not.deep.equal({});
              else expect(onPods.get(uid) ?? {}, uid).to.deep.equal({});
            }
            read = list;
          }
        },
      ),
    );
  });
});
