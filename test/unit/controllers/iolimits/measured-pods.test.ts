// What a node's reading says of the pods a limit is about: the named pods measured on all four rates (a figure missing
// is unknown), limited pods the reading leaves out as doing nothing, which pods are exempt; and when a node is in the
// IO incident a limit answers.
import { expect } from 'chai';
import { NO_LIMIT_LABEL, type IoAttribution, type IoConsumer } from '../../../../src/api/v1alpha1/index.js';
import { inIoIncident, measuredPods } from '../../../../src/controllers/iolimits/measured-pods.js';
import type { NodeObservation } from '../../../../src/controllers/policy-memory.js';
import type { PodView } from '../../../../src/detection/index.js';
import type { MeasuredPodIo, PodLimit } from '../../../../src/policy/io-limit.js';
import type { NodeFacts } from '../../../../src/policy/node-facts.js';
import { aPod, T0 } from '../../../support/builders.js';

const RATES = { readBytesPerSecond: 10, writeBytesPerSecond: 20, readOpsPerSecond: 3, writeOpsPerSecond: 4 };
const ZERO = { rbps: 0, wbps: 0, riops: 0, wiops: 0 };

const consumer = (uid: string, overrides: Partial<IoConsumer> = {}): IoConsumer => ({
  kind: 'Pod',
  role: 'Culprit',
  podUid: uid,
  namespace: 'shop',
  name: `pod-${uid}`,
  ...RATES,
  sharePercent: 60,
  ...overrides,
});

const reading = (...consumers: IoConsumer[]): IoAttribution => ({
  confidence: 'High',
  confidenceReason: 'cgroup v2',
  deviceNumber: '8:0',
  podsMeasured: consumers.length,
  consumers,
});

/** measuredPods reads only the attribution and the measured reading of an observation. */
const observed = (o: Pick<NodeObservation, 'attribution' | 'measured'>) => o as NodeObservation;

const limit = (uid: string, namespace = 'shop'): PodLimit => ({
  uid,
  namespace,
  name: `limited-${uid}`,
  device: '8:0',
  limit: { rbps: 1_000, wbps: 1_000, riops: 100, wiops: 100 },
  floor: { rbps: 100, wbps: 100, riops: 10, wiops: 10 },
  since: T0,
  changedAt: T0,
});

const running = (...pods: PodView[]) => new Map(pods.map((p) => [p.uid, p]));

/** A measured pod as the reading gives it, with RATES. */
const measured = (uid: string, overrides: Partial<MeasuredPodIo> = {}): MeasuredPodIo => ({
  uid,
  namespace: 'shop',
  name: `pod-${uid}`,
  sharePercent: 60,
  rates: { rbps: 10, wbps: 20, riops: 3, wiops: 4 },
  exempt: false,
  ...overrides,
});

/** A limited pod the reading leaves out: it did less than those it lists. */
const idle = (uid: string, exempt = false): MeasuredPodIo => ({
  uid,
  namespace: 'shop',
  name: `limited-${uid}`,
  sharePercent: 0,
  rates: ZERO,
  exempt,
});

describe('measuredPods', () => {
  const cases: {
    name: string;
    observation: Pick<NodeObservation, 'attribution' | 'measured'>;
    running?: Map<string, PodView>;
    limits?: PodLimit[];
    operatorNamespace?: string;
    quietDisk?: boolean;
    want: MeasuredPodIo[];
  }[] = [
    {
      name: 'gives a named pod its four rates and its share',
      observation: { attribution: reading(consumer('u1')) },
      want: [measured('u1')],
    },
    {
      name: "gives a pod's own IO pressure where the reading has it",
      observation: { attribution: reading(consumer('u1', { psiSomeAvg10Percent: 42 })) },
      want: [measured('u1', { psiPercent: 42 })],
    },
    {
      name: 'takes a share the reading does not give as none',
      observation: { attribution: reading(consumer('u1', { sharePercent: undefined })) },
      want: [measured('u1', { sharePercent: 0 })],
    },
    {
      name: "reads the attribution where the pressure is proven, not the reading's measure",
      observation: { attribution: reading(consumer('u1')), measured: reading(consumer('u2')) },
      want: [measured('u1')],
    },
    {
      name: 'reads the measure without an attribution, naming a limited pod by its UID',
      observation: { measured: reading(consumer('u1', { namespace: undefined, name: undefined })) },
      limits: [limit('u1', 'batch')],
      want: [measured('u1', { namespace: 'batch', name: 'limited-u1' })],
    },
    {
      name: 'leaves out a pod measured by UID alone that no limit names',
      observation: { measured: reading(consumer('u1', { namespace: undefined, name: undefined })) },
      want: [],
    },
    {
      name: "leaves out the runtime's IO and the rest of the system's",
      observation: {
        attribution: reading(
          consumer('rt', { kind: 'Runtime', role: 'Runtime' }),
          consumer('sys', { kind: 'System', role: 'System' }),
        ),
      },
      want: [],
    },
    {
      name: 'leaves out a pod named without a UID (a limit is set by UID)',
      observation: { attribution: reading(consumer('u1', { podUid: undefined })) },
      want: [],
    },
    ...(['readBytesPerSecond', 'writeBytesPerSecond', 'readOpsPerSecond', 'writeOpsPerSecond'] as const).map(
      (rate) => ({
        name: `leaves out a pod whose ${rate} is unknown: it is not zero`,
        observation: { attribution: reading(consumer('u1', { [rate]: undefined }), consumer('u2')) },
        want: [measured('u2')],
      }),
    ),
    {
      name: 'exempts a pod labelled no-limit',
      observation: { attribution: reading(consumer('u1'), consumer('u2')) },
      running: running(
        aPod()
          .withUid('u1')
          .labelled({ [NO_LIMIT_LABEL]: 'true' })
          .running()
          .build(),
        aPod()
          .withUid('u2')
          .labelled({ [NO_LIMIT_LABEL]: 'false' })
          .running()
          .build(),
      ),
      want: [measured('u1', { exempt: true }), measured('u2')],
    },
    {
      name: "exempts the operator's own pods",
      observation: { attribution: reading(consumer('u1', { namespace: 'operator' }), consumer('u2')) },
      operatorNamespace: 'operator',
      want: [measured('u1', { namespace: 'operator', exempt: true }), measured('u2')],
    },
    {
      name: 'gives a limited pod the reading does not list no IO at all',
      observation: { attribution: reading(consumer('u1')) },
      limits: [limit('u1'), limit('u2')],
      want: [measured('u1'), idle('u2')],
    },
    {
      name: 'gives a limited pod no IO on an idle device, which lists none',
      observation: { measured: reading() },
      limits: [limit('u2')],
      want: [idle('u2')],
    },
    {
      name: 'keeps a limited pod labelled no-limit exempt though the reading does not list it',
      observation: { attribution: reading() },
      running: running(
        aPod()
          .withUid('u2')
          .labelled({ [NO_LIMIT_LABEL]: 'true' })
          .running()
          .build(),
      ),
      limits: [limit('u2')],
      want: [idle('u2', true)],
    },
    {
      name: 'gives the limited pods no IO on a disk the reading finds quiet, with no attribution',
      observation: {},
      limits: [limit('u1'), limit('u2')],
      quietDisk: true,
      want: [idle('u1'), idle('u2')],
    },
    {
      name: 'knows nothing of a limited pod the reading lists with a rate missing: unknown, not idle',
      observation: { attribution: reading(consumer('u1', { writeOpsPerSecond: undefined }), consumer('u2')) },
      limits: [limit('u1'), limit('u2')],
      want: [measured('u2')],
    },
    {
      name: "exempts the operator's own limited pod the reading does not list",
      observation: { attribution: reading() },
      limits: [limit('u1', 'operator')],
      operatorNamespace: 'operator',
      want: [{ ...idle('u1', true), namespace: 'operator' }],
    },
    {
      name: 'knows nothing of the limited pods without a reading',
      observation: {},
      limits: [limit('u1')],
      want: [],
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      const got = measuredPods(
        observed(c.observation),
        c.running,
        c.limits ?? [],
        c.operatorNamespace,
        c.quietDisk ?? false,
      );
      expect(got).to.deep.equal(c.want);
    });
});

describe('inIoIncident', () => {
  const facts = (overrides: Partial<NodeFacts> = {}): NodeFacts => ({
    name: 'n1',
    ready: true,
    controlPlane: false,
    unschedulable: false,
    taints: [],
    degradedByIo: false,
    io: 'High',
    ioCause: 'Pod',
    ioStuckPods: [],
    ioHeavyPods: [],
    migrated: 0,
    ...overrides,
  });
  const cases: { name: string; facts: NodeFacts | undefined; incident: boolean }[] = [
    { name: 'is no incident on a node with no facts', facts: undefined, incident: false },
    {
      name: 'is no incident on a node under pressure with nothing stuck and nothing fenced',
      facts: facts(),
      incident: false,
    },
    { name: 'is an incident on a node degraded by IO', facts: facts({ degradedByIo: true }), incident: true },
    {
      name: 'is an incident on a node with a pod stuck from IO',
      facts: facts({ ioStuckPods: [{ namespace: 'shop', name: 'web-1', uid: 'u1' }] }),
      incident: true,
    },
    {
      name: 'is an incident on a node we fenced for it',
      facts: facts({ stamps: { policy: 'p', since: T0, reason: 'IoSaturated', cordoned: true } }),
      incident: true,
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      expect(inIoIncident(c.facts)).to.equal(c.incident);
    });
});
