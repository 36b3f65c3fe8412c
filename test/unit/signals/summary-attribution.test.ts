// Attribution from the kubelet Summary: each pod's own IO pressure (pods[].io.psi, KubeletPSI, 1.34+), which tells
// victims and bystanders but, with no IO bytes, no culprit. Against a Summary as a 1.34 kubelet writes it
// (test/fixtures/kubelet-summary/psi-pods.json) and crafted variants of it.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { IoReadingSchema, type IoAttribution, type IoConsumer } from '../../../src/api/v1alpha1/index.js';
import {
  attributionFromPods,
  KubeletSummarySource,
  readingFromSummary,
} from '../../../src/signals/kubelet-summary.js';
import { VICTIM_PSI_PERCENT } from '../../../src/signals/io-shares.js';
import { T0 } from '../../support/builders.js';

interface Summary {
  node: { io: { psi: { some: { avg10: number }; full: { avg10: number } } } };
  pods?: unknown;
}
const fixture = (): Summary =>
  JSON.parse(
    readFileSync(new URL('../../fixtures/kubelet-summary/psi-pods.json', import.meta.url), 'utf8'),
  ) as Summary;
/** The fixture with the node's IO pressure in the lowest band: an idle node. */
const quietFixture = (some: number): Summary => {
  const summary = fixture();
  summary.node.io.psi = { some: { avg10: some }, full: { avg10: 0 } };
  return summary;
};

const LOW =
  "The kubelet Summary has each pod's IO pressure but no IO bytes: it can tell victims, not culprits.";

const pod = (name: string, avg10?: unknown) => ({
  podRef: { name, namespace: 'ns', uid: `uid-${name}` },
  containers: [],
  ...(avg10 === undefined
    ? {}
    : { io: { time: '2026-11-30T09:59:57Z', psi: { some: { avg10 }, full: { avg10: 0 } } } }),
});
const consumer = (name: string, avg10: number, role: 'Victim' | 'Bystander'): IoConsumer => ({
  kind: 'Pod',
  podUid: `uid-${name}`,
  namespace: 'ns',
  name,
  psiSomeAvg10Percent: avg10,
  role,
});

describe('KubeletSummarySource attribution', () => {
  it("lists a 1.34 kubelet's pods by their IO pressure, victims first, with no shares and Low confidence", () => {
    const reading = readingFromSummary(fixture(), T0);
    expect(IoReadingSchema.safeParse(reading).success).to.equal(true);
    expect(reading).to.deep.equal({
      source: 'kubeletSummary',
      observedTime: '2026-11-30T09:59:58.000Z',
      psiSomeAvg10Percent: 45.2,
      psiSomeAvg60Percent: 30.9,
      psiFullAvg10Percent: 31.5,
      attribution: {
        cgroupVersion: 'v2',
        confidence: 'Low',
        confidenceReason: LOW,
        podsMeasured: 2,
        consumers: [
          {
            kind: 'Pod',
            podUid: '0f6b0d64-6a4f-4d3e-9d51-4f1d7a1c2b01',
            namespace: 'shop',
            name: 'db-0',
            psiSomeAvg10Percent: 62.4,
            role: 'Victim',
          },
          {
            kind: 'Pod',
            podUid: '3a1c9e2f-77b0-4c52-8d0e-5b7f2c9d4e02',
            namespace: 'shop',
            name: 'web-1',
            psiSomeAvg10Percent: 3.1,
            role: 'Bystander',
          },
        ],
      } satisfies IoAttribution,
    });
  });

  const cases: { name: string; pods: unknown; expected: IoAttribution | undefined }[] = [
    {
      name: `the five pods that wait most, of seven, and victims from ${VICTIM_PSI_PERCENT} %`,
      pods: [pod('a', 5), pod('b', 20), pod('c', 19.99), pod('d', 80), pod('e', 0), pod('f', 1), pod('g', 2)],
      expected: {
        cgroupVersion: 'v2',
        confidence: 'Low',
        confidenceReason: LOW,
        podsMeasured: 7,
        consumers: [
          consumer('d', 80, 'Victim'),
          consumer('b', 20, 'Victim'),
          consumer('c', 19.99, 'Bystander'),
          consumer('a', 5, 'Bystander'),
          consumer('g', 2, 'Bystander'),
        ],
      },
    },
    {
      name: 'only the pods with io.psi (a pod just started has io.time alone)',
      pods: [pod('a'), { ...pod('b'), io: { time: '2026-11-30T09:59:57Z' } }, pod('c', 30)],
      expected: {
        cgroupVersion: 'v2',
        confidence: 'Low',
        confidenceReason: LOW,
        podsMeasured: 1,
        consumers: [consumer('c', 30, 'Victim')],
      },
    },
    { name: 'none from a kubelet without pod io stats', pods: [pod('a'), pod('b')], expected: undefined },
    { name: 'none from a kubelet with no pods (pods: null)', pods: null, expected: undefined },
    { name: 'none from a kubelet with no pods (pods: [])', pods: [], expected: undefined },
    { name: 'none from a Summary without pods', pods: undefined, expected: undefined },
    { name: 'none when a pod PSI is a string', pods: [pod('a', 50), pod('b', '60')], expected: undefined },
    { name: 'none when a pod PSI is over 100 %', pods: [pod('a', 50), pod('b', 150)], expected: undefined },
    { name: 'none when a pod PSI is negative', pods: [pod('a', -1)], expected: undefined },
    {
      name: 'none when a pod has no podRef',
      pods: [pod('a', 50), { io: { psi: { some: { avg10: 60 } } } }],
      expected: undefined,
    },
    { name: 'none when pods is not a list', pods: { a: pod('a', 50) }, expected: undefined },
  ];
  for (const c of cases) {
    it(`reads ${c.name}, and the node's reading stands`, () => {
      const summary = fixture();
      if (c.pods === undefined) delete summary.pods;
      else summary.pods = c.pods;
      const reading = readingFromSummary(summary, T0);
      expect(reading?.psiSomeAvg10Percent).to.equal(45.2);
      expect(reading?.attribution).to.deep.equal(c.expected);
      expect(attributionFromPods(c.pods)).to.deep.equal(c.expected);
    });
  }

  it('names no pod of a quiet node', () => {
    const reading = readingFromSummary(quietFixture(2), T0);
    expect(reading?.psiSomeAvg10Percent).to.equal(2);
    expect(reading).to.not.have.property('attribution');
  });

  it('publishes the attribution through the source, and none once the node is quiet again', async () => {
    let summary: unknown = fixture();
    const source = new KubeletSummarySource(
      () => Promise.resolve(summary),
      () => T0,
    );
    await source.refresh(['n1']);
    expect(source.read('n1')?.attribution?.consumers.map((c) => [c.name, c.role])).to.deep.equal([
      ['db-0', 'Victim'],
      ['web-1', 'Bystander'],
    ]);
    summary = quietFixture(1);
    await source.refresh(['n1']);
    expect(source.read('n1')?.psiSomeAvg10Percent).to.equal(1);
    expect(source.read('n1')?.attribution).to.equal(undefined);
  });
});
