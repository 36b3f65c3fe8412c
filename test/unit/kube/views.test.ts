// Issue 12, faults and bad input: what the cache keeps of Events and pods as odd as the API lets anyone write them.
import { expect } from 'chai';
import fc from 'fast-check';
import { MAX_FAILURE_MESSAGE_CHARS } from '../../../src/detection/index.js';
import type { RawObject } from '../../../src/kube/informer.js';
import { nodeChange } from '../../../src/actuation/node-change.js';
import {
  eventView,
  gatedPodView,
  healthView,
  ioStampedPodView,
  nodeLeaseView,
  nodeView,
  podData,
  podView,
} from '../../../src/kube/views.js';

const UID = '0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11';
const IO_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded';
const reserved = (pod: string, namespace: string, uid: string) => {
  const name = `${pod}_${namespace}_${uid}_0`;
  return `failed to reserve sandbox name "${name}": name "${name}" is reserved for "${'ab'.repeat(32)}"`;
};

/** A kubelet FailedCreatePodSandBox Event as a watch delivers it, with `change` applied on top. */
function rawEvent(change: (e: Record<string, unknown>) => void = () => undefined): RawObject {
  const event: Record<string, unknown> = {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: {
      name: 'web-0.1800a',
      namespace: 'shop',
      uid: 'e1',
      creationTimestamp: '2026-11-30T10:00:00Z',
    },
    involvedObject: { kind: 'Pod', namespace: 'shop', name: 'web-0', uid: UID },
    reason: 'FailedCreatePodSandBox',
    type: 'Warning',
    message: IO_MESSAGE,
    source: { component: 'kubelet', host: 'n1' },
    reportingComponent: 'kubelet',
    reportingInstance: 'n1',
    count: 3,
    lastTimestamp: '2026-11-30T10:05:00Z',
  };
  change(event);
  return event;
}
/** When the cache received the Event in these tests. */
const SEEN = new Date('2026-11-30T11:00:00Z');
const involved = (e: Record<string, unknown>) => e.involvedObject as Record<string, unknown>;

describe('eventView on odd Events', () => {
  it('keeps a kubelet Event as it is', () => {
    expect(eventView(rawEvent(), SEEN)).to.deep.equal({
      uid: 'e1',
      type: 'Warning',
      reason: 'FailedCreatePodSandBox',
      message: IO_MESSAGE,
      involvedKind: 'Pod',
      involvedNamespace: 'shop',
      involvedName: 'web-0',
      involvedUid: UID,
      count: 3,
      lastTime: new Date('2026-11-30T10:05:00Z'),
      reportingController: 'kubelet',
      reportingInstance: 'n1',
    });
  });

  // Read as config/events/admission-policy.yaml reads it: source first, else the reporting fields.
  const authors: { name: string; change: (e: Record<string, unknown>) => void; author: [string, string] }[] =
    [
      { name: 'source, as kubelet writes it', change: () => undefined, author: ['kubelet', 'n1'] },
      {
        name: 'the reporting fields when there is no source (events.k8s.io/v1)',
        change: (e) => delete e.source,
        author: ['kubelet', 'n1'],
      },
      {
        name: 'source over reporting fields that name another',
        change: (e) => {
          e.reportingComponent = 'tenant';
          e.reportingInstance = 'n2';
        },
        author: ['kubelet', 'n1'],
      },
      {
        name: 'the reporting fields over an empty source',
        change: (e) => {
          e.source = { component: '', host: '' };
          e.reportingInstance = 'n2';
        },
        author: ['kubelet', 'n2'],
      },
      {
        name: 'nothing when neither names anyone',
        change: (e) => {
          e.source = { component: 7, host: null };
          delete e.reportingComponent;
          delete e.reportingInstance;
        },
        author: ['', ''],
      },
    ];
  for (const { name, change, author } of authors)
    it(`reads who wrote it from ${name}`, () => {
      const view = eventView(rawEvent(change), SEEN);
      expect([view?.reportingController, view?.reportingInstance]).to.deep.equal(author);
    });

  const dropped: { name: string; change: (e: Record<string, unknown>) => void }[] = [
    { name: 'no involvedObject', change: (e) => delete e.involvedObject },
    { name: 'an involvedObject that is not an object', change: (e) => (e.involvedObject = 'web-0') },
    { name: 'an involved kind other than Pod', change: (e) => (involved(e).kind = 'Node') },
    { name: 'no involved name', change: (e) => delete involved(e).name },
    { name: 'no involved namespace', change: (e) => delete involved(e).namespace },
    { name: 'no uid and no reserved name to take one from', change: (e) => delete involved(e).uid },
    {
      name: 'no uid, and a reserved name of a pod in another namespace',
      change: (e) => {
        delete involved(e).uid;
        e.message = reserved('web-0', 'bank', UID);
      },
    },
    { name: 'an involved name no pod can have', change: (e) => (involved(e).name = 'Web_0') },
    { name: 'an involved name of 300 characters', change: (e) => (involved(e).name = 'a'.repeat(300)) },
    { name: 'an involved name that is a path', change: (e) => (involved(e).name = '../web-0') },
    { name: 'an involved uid of 1 MB', change: (e) => (involved(e).uid = 'u'.repeat(1_000_000)) },
    {
      // Regression: an Event with an eventTime may name another namespace's pod (the apiserver checks only
      // Events without one); it was kept and joined to that pod by uid.
      name: "an involved pod in another namespace than the Event's",
      change: (e) => {
        (e.metadata as Record<string, unknown>).namespace = 'tenant';
        e.eventTime = '2026-11-30T10:05:00.000000Z';
      },
    },
    {
      name: 'the events.k8s.io shape (regarding and note)',
      change: (e) => {
        e.regarding = e.involvedObject;
        e.note = e.message;
        delete e.involvedObject;
        delete e.message;
      },
    },
    { name: 'another reason', change: (e) => (e.reason = 'Scheduled') },
    { name: 'a Failed Event that is no creation error', change: (e) => (e.reason = 'Failed') },
  ];
  for (const { name, change } of dropped) {
    it(`drops an Event with ${name}`, () => {
      expect(eventView(rawEvent(change))).to.equal(undefined);
    });
  }

  it('keeps an Event without a uid whose reserved name is its own pod', () => {
    const view = eventView(
      rawEvent((e) => {
        delete involved(e).uid;
        e.message = reserved('web-0', 'shop', UID);
      }),
    );
    expect(view?.involvedUid).to.equal(undefined);
    expect(view?.involvedName).to.equal('web-0');
  });

  // Regression: a 1 MB message was kept whole, in every Event of a flood.
  it('keeps the head of a 1 MB message, and control characters as they are', () => {
    const message = `\u0000\u001b[31m${IO_MESSAGE}\r\n${'x'.repeat(1_000_000)}`;
    const view = eventView(rawEvent((e) => (e.message = message)));
    expect(view?.message).to.equal(message.slice(0, MAX_FAILURE_MESSAGE_CHARS));
  });

  it('keeps a bounded type whatever the API was given', () => {
    expect(eventView(rawEvent((e) => (e.type = 'x'.repeat(10_000))))?.type).to.equal('Normal');
    expect(eventView(rawEvent((e) => delete e.type))?.type).to.equal('Normal');
  });

  const counts: { name: string; change: (e: Record<string, unknown>) => void; count: number }[] = [
    { name: 'none', change: (e) => delete e.count, count: 1 },
    { name: '0 (events.k8s.io Events leave it unset)', change: (e) => (e.count = 0), count: 1 },
    { name: 'negative', change: (e) => (e.count = -7), count: 1 },
    { name: 'fractional', change: (e) => (e.count = 2.9), count: 2 },
    { name: 'beyond int32', change: (e) => (e.count = 1e308), count: 2 ** 31 - 1 },
    { name: 'a string', change: (e) => (e.count = '5'), count: 1 },
    {
      name: 'in a series',
      change: (e) => (e.series = { count: 9, lastObservedTime: '2026-11-30T10:06:00.123456Z' }),
      count: 9,
    },
  ];
  for (const { name, change, count } of counts) {
    it(`reads a count that is ${name} as ${count}`, () => {
      expect(eventView(rawEvent(change))?.count).to.equal(count);
    });
  }

  const times: { name: string; change: (e: Record<string, unknown>) => void; time: string }[] = [
    {
      name: 'series.lastObservedTime first (microseconds)',
      change: (e) => (e.series = { count: 2, lastObservedTime: '2026-11-30T10:06:00.123456Z' }),
      time: '2026-11-30T10:06:00.123Z',
    },
    {
      name: 'eventTime without lastTimestamp',
      change: (e) => {
        delete e.lastTimestamp;
        e.eventTime = '2026-11-30T10:07:00.000001Z';
      },
      time: '2026-11-30T10:07:00.000Z',
    },
    {
      name: 'creationTimestamp when no other time is there',
      change: (e) => delete e.lastTimestamp,
      time: '2026-11-30T10:00:00.000Z',
    },
    {
      name: 'the epoch when there is no time at all',
      change: (e) => {
        delete e.lastTimestamp;
        delete (e.metadata as Record<string, unknown>).creationTimestamp;
      },
      time: '1970-01-01T00:00:00.000Z',
    },
    {
      name: 'the next time when one is not a time',
      change: (e) => (e.lastTimestamp = 'yesterday'),
      time: '2026-11-30T10:00:00.000Z',
    },
    {
      // A year the apiserver cannot write (RFC 3339): a status could not hold it either.
      name: 'the next time when one is beyond year 9999',
      change: (e) => (e.lastTimestamp = '+275760-09-13T00:00:00Z'),
      time: '2026-11-30T10:00:00.000Z',
    },
    {
      name: 'the time it was seen when it is dated later',
      change: (e) => (e.lastTimestamp = '2099-01-01T00:00:00Z'),
      time: SEEN.toISOString(),
    },
    {
      name: 'the time it was seen for a far-future time the API can hold',
      change: (e) => (e.lastTimestamp = '9999-12-31T23:59:59Z'),
      time: SEEN.toISOString(),
    },
    {
      name: 'its own time when that is the time it was seen',
      change: (e) => (e.lastTimestamp = SEEN.toISOString()),
      time: SEEN.toISOString(),
    },
    {
      name: 'a far-past time',
      change: (e) => (e.lastTimestamp = '0001-01-01T00:00:00Z'),
      time: '0001-01-01T00:00:00.000Z',
    },
    {
      name: 'a Date from a list',
      change: (e) => (e.lastTimestamp = new Date('2026-11-30T10:08:00Z')),
      time: '2026-11-30T10:08:00.000Z',
    },
  ];
  for (const { name, change, time } of times) {
    it(`takes as the last time ${name}`, () => {
      expect(eventView(rawEvent(change), SEEN)?.lastTime.toISOString()).to.equal(time);
    });
  }

  it('never throws, and keeps nothing unbounded, whatever the Event', () => {
    const anything = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.integer(),
      fc.double(),
      fc.constant(null),
      fc.constant(undefined),
      fc.date({ noInvalidDate: false }),
      fc.array(fc.string(), { maxLength: 3 }),
    );
    const field = <T>(arb: fc.Arbitrary<T>) => fc.oneof(arb, anything);
    fc.assert(
      fc.property(
        fc.record(
          {
            metadata: field(fc.record({ namespace: field(fc.constantFrom('shop', 'bank')), name: anything })),
            involvedObject: field(
              fc.record(
                {
                  kind: field(fc.constant('Pod')),
                  namespace: field(fc.constantFrom('shop', 'bank')),
                  name: field(fc.constantFrom('web-0', 'db-0')),
                  uid: field(fc.uuid()),
                },
                { requiredKeys: [] },
              ),
            ),
            reason: field(fc.constantFrom('FailedCreatePodSandBox', 'Failed')),
            message: field(fc.string({ unit: 'binary', maxLength: 5000 })),
            type: anything,
            count: anything,
            series: field(fc.record({ count: anything, lastObservedTime: anything })),
            lastTimestamp: anything,
            eventTime: anything,
          },
          { requiredKeys: [] },
        ),
        (raw) => {
          const view = eventView(raw as RawObject);
          if (!view) return;
          expect(view.message.length).to.be.at.most(MAX_FAILURE_MESSAGE_CHARS);
          expect(view.involvedKind).to.equal('Pod');
          expect(Number.isSafeInteger(view.count) && view.count >= 1).to.equal(true);
          expect(Number.isNaN(view.lastTime.getTime())).to.equal(false);
          expect(JSON.stringify(view).length).to.be.below(MAX_FAILURE_MESSAGE_CHARS * 6 + 1_000);
        },
      ),
      { numRuns: 1000 },
    );
  });
});

describe('podView on odd node names', () => {
  const rawPod = (nodeName: unknown): RawObject => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'web-0',
      namespace: 'shop',
      uid: UID,
      creationTimestamp: new Date('2026-11-30T10:00:00Z'),
    },
    spec: { nodeName },
    status: { phase: 'Pending' },
  });
  const cases: { nodeName: unknown; kept: string | undefined }[] = [
    { nodeName: 'node-1', kept: 'node-1' },
    { nodeName: '', kept: undefined },
    { nodeName: undefined, kept: undefined },
    { nodeName: 42, kept: undefined },
    // Kept as they are: nothing is done with a node name but look it up exactly among the cached nodes.
    { nodeName: 'NODE-1', kept: 'NODE-1' },
    { nodeName: '../x', kept: '../x' },
    { nodeName: 'ｎode-1', kept: 'ｎode-1' },
  ];
  for (const { nodeName, kept } of cases) {
    it(`keeps the node name ${JSON.stringify(nodeName)} as ${JSON.stringify(kept)}`, () => {
      expect(podView(rawPod(nodeName))?.nodeName).to.equal(kept);
    });
  }
});

describe('healthView', () => {
  const raw = (managedFields: Record<string, string>[]): RawObject => ({
    apiVersion: 'sandbox.remediator.io/v1alpha1',
    kind: 'SandboxHealth',
    metadata: { name: 'n1', uid: 'u1', managedFields },
    spec: { nodeName: 'n1' },
  });
  it("keeps when the apiserver took the agent's status, and no other manager's", () => {
    const view = healthView(
      raw([
        {
          manager: 'sandbox-remediator',
          operation: 'Update',
          subresource: 'status',
          time: '2026-12-01T10:00:05Z',
        },
        { manager: 'sandbox-remediator-agent', operation: 'Apply', time: '2026-12-01T09:00:00Z' },
        {
          manager: 'sandbox-remediator-agent',
          operation: 'Apply',
          subresource: 'status',
          time: '2026-12-01T10:00:01Z',
        },
      ]),
    );
    expect(view?.readingWrittenTime).to.equal('2026-12-01T10:00:01Z');
    expect(healthView(raw([]))).to.not.have.property('readingWrittenTime');
  });
});

describe('nodeView taints', () => {
  const unreachable = {
    key: 'node.kubernetes.io/unreachable',
    effect: 'NoExecute',
    timeAdded: '2026-12-02T10:00:00Z',
  };
  const taints = [{ key: 'dedicated', value: 'db', effect: 'NoSchedule' }, unreachable];
  const raw = { metadata: { name: 'n1', uid: 'u1' }, spec: { taints } } as RawObject;

  it('keeps each taint whole, timeAdded included, so that a patch of the list gives the others back exactly', () => {
    const view = nodeView(raw)!;
    expect(view.taints).to.deep.equal(taints);
    const taint = { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' };
    const change = nodeChange(
      view,
      [{ kind: 'Taint', taint, node: 'n1', target: 'node/n1', reason: 'IoSaturated', message: '' }],
      undefined,
      undefined,
    );
    expect(change.taints).to.deep.equal([...taints, taint]);
  });

  it('keeps timeAdded as the apiserver wrote it from a list too, where client-node makes it a Date', () => {
    const listed = {
      ...raw,
      spec: { taints: [{ ...unreachable, timeAdded: new Date(unreachable.timeAdded) }] },
    };
    expect(nodeView(listed)!.taints).to.deep.equal([unreachable]);
  });
});

describe('nodeLeaseView', () => {
  const raw = (name: string, spec: Record<string, unknown>) =>
    ({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name, uid: 'u1' },
      spec,
    }) as RawObject;

  it('reads a node lease from a watch (MicroTime strings) and from a list (Dates) alike', () => {
    const spec = {
      holderIdentity: 'NodeHealthCheck-nhc',
      leaseDurationSeconds: 60,
      acquireTime: '2026-12-03T08:00:00.123456Z',
      renewTime: '2026-12-03T08:00:30.000000Z',
      leaseTransitions: 1,
    };
    const expected = {
      node: 'kwok-node-1',
      uid: 'u1',
      holder: 'NodeHealthCheck-nhc',
      acquireTime: new Date('2026-12-03T08:00:00.123Z'),
      renewTime: new Date('2026-12-03T08:00:30Z'),
      durationSeconds: 60,
      transitions: 1,
    };
    expect(nodeLeaseView(raw('node-kwok-node-1', spec))).to.deep.equal(expected);
    const listed = { ...spec, acquireTime: expected.acquireTime, renewTime: expected.renewTime };
    expect(nodeLeaseView(raw('node-kwok-node-1', listed))).to.deep.equal(expected);
  });

  it('keeps no lease but node-<node>, and leaves out what a lease does not say', () => {
    expect(nodeLeaseView(raw('sandbox-remediator-operator', { holderIdentity: 'x' }))).to.equal(undefined);
    expect(nodeLeaseView(raw('node-n1', {}))).to.deep.equal({ node: 'n1', uid: 'u1' });
  });
});

describe('podData: what a running pod keeps on its node', () => {
  it('reads local volumes, claims and priority, and not memory-backed or remote volumes', () => {
    const pod: RawObject = {
      apiVersion: 'v1',
      kind: 'Pod',
      spec: {
        priority: 2_000_000_000,
        priorityClassName: 'system-cluster-critical',
        volumes: [
          { name: 'scratch', emptyDir: {} },
          { name: 'shm', emptyDir: { medium: 'Memory' } },
          { name: 'logs', hostPath: { path: '/var/log' } },
          { name: 'tmp', ephemeral: { volumeClaimTemplate: { spec: {} } } },
          { name: 'data', persistentVolumeClaim: { claimName: 'db-data' } },
          { name: 'config', configMap: { name: 'app' } },
          { name: 'token', projected: { sources: [] } },
          'not a volume',
        ],
      },
    };
    expect(podData(pod)).to.deep.equal({
      localVolumes: ['scratch', 'logs', 'tmp'],
      claims: ['db-data'],
      priority: 2_000_000_000,
      priorityClassName: 'system-cluster-critical',
    });
  });

  it('reads nothing of a pod with no spec', () => {
    expect(podData({ apiVersion: 'v1', kind: 'Pod' })).to.deep.equal({ localVolumes: [], claims: [] });
  });
});

describe('gatedPodView: when a pod was gated', () => {
  const gated = (annotations: Record<string, string>) =>
    gatedPodView({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: 'p',
        namespace: 'shop',
        uid: 'u',
        creationTimestamp: '2026-12-01T10:00:00Z',
        annotations,
      },
      spec: { schedulingGates: [{ name: 'sandbox.remediator.io/paced' }] },
    } as unknown as RawObject)?.gatedAt.toISOString();
  const rows: [string, Record<string, string>, string][] = [
    [
      "the webhook's stamp",
      { 'sandbox.remediator.io/gated-at': '2026-12-01T10:00:00.480Z' },
      '2026-12-01T10:00:00.480Z',
    ],
    [
      'a stamp a moment before the whole second',
      { 'sandbox.remediator.io/gated-at': '2026-12-01T09:59:59.900Z' },
      '2026-12-01T09:59:59.900Z',
    ],
    [
      'a forged stamp long before creation',
      { 'sandbox.remediator.io/gated-at': '2000-01-01T00:00:00Z' },
      '2026-12-01T10:00:00.000Z',
    ],
    [
      'a forged stamp after creation',
      { 'sandbox.remediator.io/gated-at': '2026-12-01T11:00:00Z' },
      '2026-12-01T10:00:00.000Z',
    ],
    ['no stamp', {}, '2026-12-01T10:00:00.000Z'],
  ];
  for (const [name, annotations, expected] of rows)
    it(`takes ${expected} for ${name}`, () => {
      expect(gated(annotations)).to.equal(expected);
    });
});

describe('ioStampedPodView: the pods cleanup takes IO-limit stamps off', () => {
  const pod = (annotations: Record<string, string>): RawObject => ({
    metadata: { name: 'db-0', namespace: 'shop', uid: 'u1', annotations },
    spec: { nodeName: 'n1' },
  });
  const stamps = {
    'sandbox.remediator.io/io-limited-by': 'p',
    'sandbox.remediator.io/io-limit': '8:0 wbps=4194304',
    'sandbox.remediator.io/io-limited-uid': 'u1',
  };

  it('keeps a pod stamped for its own uid, with its node, policy and limit', () => {
    expect(ioStampedPodView(pod(stamps))).to.deep.equal({
      namespace: 'shop',
      name: 'db-0',
      uid: 'u1',
      nodeName: 'n1',
      policy: 'p',
      limit: '8:0 wbps=4194304',
    });
  });

  it('keeps no pod without our stamps, nor one whose stamps name another uid (copied with its manifest)', () => {
    expect(ioStampedPodView(pod({ 'sandbox.remediator.io/gated-by': 'p' }))).to.equal(undefined);
    expect(ioStampedPodView(pod({ ...stamps, 'sandbox.remediator.io/io-limited-uid': 'u0' }))).to.equal(
      undefined,
    );
  });
});
