// Attribution from cAdvisor through Prometheus, against crafted answers: what the operator would read for a node's
// pods from the two attribution queries, beside the node_exporter reading. Every case names the node's reading it
// expects, whole, so that a change in a figure, a share or a role fails here.
import { expect } from 'chai';
import {
  IoReadingSchema,
  type IoAttribution,
  type IoConsumer,
  type IoRole,
} from '../../../src/api/v1alpha1/index.js';
import { attributionQueries, PrometheusSource, QUERIES } from '../../../src/signals/prometheus.js';
import { T0 } from '../../support/builders.js';

const settings = {
  url: 'http://prom.example:9090',
  nodeLabel: 'instance',
  nodeLabelRegex: '^([^:]+)(:\\d+)?$',
  queryTimeoutSeconds: 5,
};
const queries = attributionQueries(settings.nodeLabel) ?? expect.fail('instance is a label name');

type Series = [Record<string, string>, number | string];
const vector = (series: Series[]) => ({
  status: 'success',
  data: { resultType: 'vector', result: series.map(([metric, v]) => ({ metric, value: [0, String(v)] })) },
});

/** One cAdvisor rate of one container (container '' is the pod's own cgroup), as the pods query answers it. */
const io = (pod: string, container: string, device: string, measure: string, v: number | string): Series => {
  const [namespace = '', name = ''] = pod.split('/');
  return [{ instance: 'n1:10250', namespace, pod: name, container, device, measure }, v];
};
const podsSeen = (n: number | string, node = 'n1'): Series => [
  { instance: `${node}:10250`, measure: 'pods' },
  n,
];
const disk = (device: string, rates: Record<string, number | string>, node = 'n1'): Series[] =>
  Object.entries(rates).map(([measure, v]) => [{ instance: `${node}:9100`, device, measure }, v]);

/** sda is saturated: 10 MB/s read, 90 MB/s written, 100 reads and 900 writes a second; sdb idles. */
const SDA = { busy: 0.98, readBytes: 10e6, writeBytes: 90e6, readOps: 100, writeOps: 900 };
const DISKS = [...disk('sda', SDA), ...disk('sdb', { busy: 0.02, readBytes: 1e6, writeBytes: 1e6 })];
const MEDIUM =
  "cAdvisor's per-container counters via Prometheus, 1-minute rates: on cgroup v1 buffered writeback is charged to the flusher, not the pod; the runtime's own IO counts as System.";

const EVERY_DISK = `${MEDIUM} Every disk counted: the busiest one, or the series device, is unknown.`;

/** A listed pod: its bytes read and written a second, its share, its role, its operations where known. */
const aPod = (
  pod: string,
  bytes: [number, number],
  share: number,
  role: IoRole,
  ops?: number,
): IoConsumer => {
  const [namespace, name] = pod.split('/');
  return { kind: 'Pod', namespace, name, ...rates(bytes, ops), sharePercent: share, role };
};
const system = (bytes: [number, number], share: number, ops?: number): IoConsumer => ({
  kind: 'System',
  ...rates(bytes, ops),
  sharePercent: share,
  role: 'System',
});
const rates = ([read, write]: [number, number], ops?: number) => ({
  readBytesPerSecond: read,
  writeBytesPerSecond: write,
  ...(ops === undefined ? {} : { opsPerSecond: ops }),
});
/** The attribution of sda, the busiest disk (100 MB/s, 1,000 operations a second). */
const onSda = (podsMeasured: number, consumers: IoConsumer[]): IoAttribution => ({
  device: 'sda',
  confidence: 'Medium',
  confidenceReason: MEDIUM,
  totalBytesPerSecond: 100e6,
  totalOpsPerSecond: 1000,
  podsMeasured,
  consumers,
});
/** The attribution of every disk (sda and sdb: 102 MB/s, operations unknown), as when the device is unknown. */
const onEveryDisk = (podsMeasured: number, consumers: IoConsumer[]): IoAttribution => ({
  confidence: 'Medium',
  confidenceReason: EVERY_DISK,
  totalBytesPerSecond: 102e6,
  podsMeasured,
  consumers,
});

interface Answers {
  pods?: unknown;
  devices?: unknown;
  /** PSI some for each node: 60 (pressed) unless said. */
  psi?: Record<string, number>;
}

async function readAttribution(answers: Answers, nodes = ['n1']) {
  const psi = answers.psi ?? { n1: 60 };
  const byQuery: Record<string, unknown> = {
    [QUERIES.psiSomeAvg10Percent]: vector(
      Object.entries(psi).map(([n, v]) => [{ instance: `${n}:9100` }, v]),
    ),
    [QUERIES.psiFullAvg10Percent]: vector([]),
    [QUERIES.diskBusyPercent]: vector([]),
    [QUERIES.blockedProcesses]: vector([]),
    [queries.pods]: answers.pods,
    [queries.devices]: answers.devices,
  };
  const asked: string[] = [];
  const fetchFn = ((url: URL) => {
    const q = url.searchParams.get('query') ?? '';
    asked.push(q);
    const answer = byQuery[q];
    return Promise.resolve(
      answer instanceof Response
        ? answer
        : new Response(JSON.stringify(answer ?? vector([])), { status: 200 }),
    );
  }) as unknown as typeof fetch;
  const source = new PrometheusSource(settings, fetchFn, () => T0);
  await source.refresh(nodes);
  for (const node of nodes) {
    const reading = source.read(node);
    expect(IoReadingSchema.safeParse(reading).success, `${node}'s reading fits the API`).to.equal(true);
  }
  return { source, asked, attribution: source.read('n1')?.attribution };
}

const shares = (a: IoAttribution | undefined) => a?.consumers.map((c) => c.sharePercent);
const sumOf = (values: (number | undefined)[] | undefined) =>
  (values ?? []).reduce<number>((s, v) => s + (v ?? 0), 0);

describe('PrometheusSource attribution', () => {
  const cases: {
    name: string;
    pods: Series[];
    devices?: Series[];
    expected: IoAttribution | undefined;
  }[] = [
    {
      name: 'sums the containers of a pod, and leaves the rest of the device to System',
      pods: [
        podsSeen(3),
        io('shop/db-0', 'postgres', '/dev/sda', 'writeBytes', 30e6),
        io('shop/db-0', 'wal-g', '/dev/sda', 'writeBytes', 20e6),
        io('shop/db-0', 'wal-g', '/dev/sda', 'readBytes', 2e6),
        io('shop/web-1', 'nginx', '/dev/sda', 'readBytes', 3e6),
      ],
      expected: onSda(3, [
        aPod('shop/db-0', [2e6, 50e6], 52, 'Culprit'),
        aPod('shop/web-1', [3e6, 0], 3, 'Bystander'),
        // The pods' ops are unknown (no fs_*_total series), so the rest's are too.
        system([5e6, 40e6], 45),
      ]),
    },
    {
      name: "does not count a pod twice: its own cgroup's series (container='') against its containers'",
      pods: [
        podsSeen(2),
        // Hierarchical counters: the pod's cgroup holds its container's 30 MB/s and a little of its own.
        io('shop/db-0', 'postgres', '/dev/sda', 'writeBytes', 30e6),
        io('shop/db-0', '', '/dev/sda', 'writeBytes', 31e6),
        // Flat counters (v1 throttle files): the pod's cgroup holds next to nothing.
        io('shop/web-1', 'nginx', '/dev/sda', 'writeBytes', 20e6),
        io('shop/web-1', '', '/dev/sda', 'writeBytes', 1e3),
        // dockershim's sandbox container is neither.
        io('shop/web-1', 'POD', '/dev/sda', 'writeBytes', 50e6),
      ],
      expected: onSda(2, [
        aPod('shop/db-0', [0, 31e6], 31, 'Culprit'),
        aPod('shop/web-1', [0, 20e6], 20, 'Bystander'),
        system([10e6, 39e6], 49),
      ]),
    },
    {
      name: 'counts only the busiest disk (a whole disk before the dm device on it), and ops where cAdvisor has them',
      pods: [
        podsSeen(1),
        io('batch/etl-7', 'etl', '/dev/sda', 'writeBytes', 4e6),
        io('batch/etl-7', 'etl', '/dev/sda', 'writeOps', 600),
        io('batch/etl-7', 'etl', '/dev/sdb', 'writeBytes', 80e6),
        io('batch/etl-7', 'etl', '/dev/dm-0', 'writeBytes', 4e6),
      ],
      devices: [...DISKS, ...disk('dm-0', { busy: 0.99, readBytes: 10e6, writeBytes: 90e6 })],
      expected: onSda(1, [
        // 4 % of the bytes, 60 % of the operations: random writes saturate a disk by its IOPS.
        aPod('batch/etl-7', [0, 4e6], 60, 'Culprit', 600),
        system([10e6, 86e6], 40, 400),
      ]),
    },
    {
      name: 'says every disk was counted when the busiest is unknown, and counts no stacked device',
      pods: [
        podsSeen(1),
        io('batch/etl-7', 'etl', '/dev/sda', 'writeBytes', 40e6),
        io('batch/etl-7', 'etl', '/dev/sdb', 'writeBytes', 2e6),
        io('batch/etl-7', 'etl', '/dev/dm-0', 'writeBytes', 40e6),
      ],
      devices: [
        ...disk('sda', { readBytes: 10e6, writeBytes: 90e6 }),
        ...disk('sdb', { readBytes: 0, writeBytes: 2e6 }),
        ...disk('dm-0', { readBytes: 10e6, writeBytes: 90e6 }),
      ],
      expected: onEveryDisk(1, [
        aPod('batch/etl-7', [0, 42e6], 41.2, 'Culprit'),
        // sda and sdb: dm-0's 90 MB/s are sda's, counted once.
        system([10e6, 50e6], 58.8),
      ]),
    },
    {
      name: 'counts every disk when the series have no device label, and says so',
      pods: [podsSeen(1), io('batch/etl-7', 'etl', '', 'writeBytes', 25e6)],
      expected: onEveryDisk(1, [
        aPod('batch/etl-7', [0, 25e6], 24.5, 'Bystander'),
        system([11e6, 66e6], 75.5),
      ]),
    },
    {
      name: 'gives the whole device to System when cAdvisor measured pods and none moved',
      pods: [podsSeen(12)],
      expected: onEveryDisk(12, [system([11e6, 91e6], 100)]),
    },
    { name: 'has none without cAdvisor series for the node', pods: [], expected: undefined },
    {
      name: 'has none without node_exporter disk series for the node',
      pods: [podsSeen(1), io('shop/db-0', 'postgres', '/dev/sda', 'writeBytes', 30e6)],
      devices: [],
      expected: undefined,
    },
    {
      name: 'has none when the busiest disk has no written bytes',
      pods: [podsSeen(1), io('shop/db-0', 'postgres', '/dev/sda', 'writeBytes', 30e6)],
      devices: disk('sda', { busy: 0.9, readBytes: 1e6 }),
      expected: undefined,
    },
    ...(
      [
        ['a negative rate', -5],
        ['NaN', 'NaN'],
        ['+Inf', '+Inf'],
        ['a rate no disk has', 1e300],
      ] as const
    ).map(([what, v]) => ({
      name: `has none for a node with ${what} in its pods' series`,
      pods: [
        podsSeen(2),
        io('shop/db-0', 'postgres', '/dev/sda', 'writeBytes', 30e6),
        io('shop/web-1', 'nginx', '/dev/sda', 'readBytes', v),
      ],
      expected: undefined,
    })),
    {
      name: 'has none for a node with an impossible busy time',
      pods: [podsSeen(1), io('shop/db-0', 'postgres', '/dev/sda', 'writeBytes', 30e6)],
      devices: [...DISKS, ...disk('sdc', { busy: 7 })],
      expected: undefined,
    },
  ];

  for (const c of cases) {
    it(c.name, async () => {
      const { source, attribution } = await readAttribution({
        pods: vector(c.pods),
        devices: vector(c.devices ?? DISKS),
      });
      expect(attribution).to.deep.equal(
        c.expected && JSON.parse(JSON.stringify(c.expected)),
        JSON.stringify(attribution),
      );
      if (attribution?.consumers.some((x) => x.sharePercent !== undefined))
        expect(sumOf(shares(attribution)), 'the shares add up to 100').to.be.closeTo(100, 1e-9);
      expect(source.read('n1')?.psiSomeAvg10Percent, 'the PSI reading stands').to.equal(60);
      expect(source.problem('n1')).to.equal(undefined);
    });
  }

  it('lists the top five pods and puts the others in System, the shares adding up to 100', async () => {
    const busy = [40, 20, 10, 6, 5, 4, 3].map((mb, i) =>
      io(`shop/p-${i}`, 'c', '/dev/sda', 'writeBytes', mb * 1e6),
    );
    const { attribution } = await readAttribution({
      pods: vector([podsSeen(9), ...busy]),
      devices: vector(DISKS),
    });
    expect(attribution?.consumers.map((c) => c.name ?? c.kind)).to.deep.equal([
      'p-0',
      'p-1',
      'p-2',
      'p-3',
      'p-4',
      'System',
    ]);
    expect(shares(attribution)).to.deep.equal([40, 20, 10, 6, 5, 19]);
    expect(attribution?.consumers.map((c) => c.role)).to.deep.equal([
      'Culprit',
      'Bystander',
      'Bystander',
      'Bystander',
      'Bystander',
      'System',
    ]);
    expect(attribution?.podsMeasured).to.equal(9);
  });

  it('scales the shares when the pods did more than the device (other scrape moments), to 100 with System at 0', async () => {
    const pods = [
      podsSeen(2),
      io('a/x', 'c', '/dev/sda', 'writeBytes', 90e6),
      io('a/y', 'c', '/dev/sda', 'writeBytes', 60e6),
    ];
    const { attribution } = await readAttribution({ pods: vector(pods), devices: vector(DISKS) });
    expect(shares(attribution)).to.deep.equal([60, 40, 0]);
    expect(attribution?.consumers.at(-1)).to.deep.include({
      kind: 'System',
      writeBytesPerSecond: 0,
      readBytesPerSecond: 10e6,
    });
  });

  it("scales the shares when the larger of each pod's bytes and ops shares add up to over 100", async () => {
    // x: 80 % of the bytes, no ops known; y: 6 % of the bytes, 60 % of the ops. 140 % scaled to 100.
    const pods = [
      podsSeen(2),
      io('a/x', 'c', '/dev/sda', 'writeBytes', 80e6),
      io('a/y', 'c', '/dev/sda', 'writeBytes', 6e6),
      io('a/y', 'c', '/dev/sda', 'writeOps', 600),
    ];
    const { attribution } = await readAttribution({ pods: vector(pods), devices: vector(DISKS) });
    expect(shares(attribution)).to.deep.equal([57.1, 42.9, 0]);
  });

  it('gives shares in tenths that add up to exactly 100, the largest remainder taking the tenth left (io-shares.ts)', async () => {
    const pods = [
      podsSeen(3),
      ...['x', 'y', 'z'].map((p) => io(`a/${p}`, 'c', '/dev/sda', 'writeBytes', 100e6 / 3)),
    ];
    const { attribution } = await readAttribution({ pods: vector(pods), devices: vector(DISKS) });
    expect(shares(attribution)).to.deep.equal([33.4, 33.3, 33.3, 0]);
  });

  it('calls a pod a culprit from a published share of 25 %, not below', async () => {
    const pods = [
      podsSeen(2),
      io('a/at', 'c', '/dev/sda', 'writeBytes', 25e6),
      io('a/under', 'c', '/dev/sda', 'writeBytes', 24.9e6),
    ];
    const { attribution } = await readAttribution({ pods: vector(pods), devices: vector(DISKS) });
    expect(attribution?.consumers.map((c) => [c.name, c.sharePercent, c.role])).to.deep.equal([
      ['at', 25, 'Culprit'],
      ['under', 24.9, 'Bystander'],
      [undefined, 50.1, 'System'],
    ]);
  });

  it('keeps the readings when an attribution query fails or answers garbage, and attributes again after', async () => {
    const good = {
      pods: vector([podsSeen(1), io('shop/db-0', 'c', '/dev/sda', 'writeBytes', 30e6)]),
      devices: vector(DISKS),
    };
    const bad: Answers[] = [
      { ...good, pods: new Response('{"status":"error","error":"query timed out"}', { status: 503 }) },
      { ...good, devices: new Response('<html>', { status: 200 }) },
      { ...good, pods: { status: 'success', data: { resultType: 'vector', result: 'n1 99' } } },
      { ...good, devices: { status: 'success', data: { resultType: 'matrix', result: [] } } },
      { ...good, pods: vector([[{ instance: 'n1:10250', measure: 'pods' }, 'many']]) },
    ];
    for (const answers of bad) {
      const { source, attribution } = await readAttribution(answers);
      expect(attribution, JSON.stringify(answers.pods)).to.equal(undefined);
      expect(source.read('n1')?.psiSomeAvg10Percent).to.equal(60);
      expect(source.problem('n1')).to.equal(undefined);
    }
    expect((await readAttribution(good)).attribution?.consumers[0]?.name).to.equal('db-0');
  });

  it('attributes each node from its own series, and a bad series of one node costs only that node', async () => {
    const n2 = (pod: string, v: number | string): Series => [
      {
        instance: 'n2:10250',
        namespace: 'shop',
        pod,
        container: 'c',
        device: '/dev/sda',
        measure: 'writeBytes',
      },
      v,
    ];
    const pods = [
      podsSeen(1),
      io('shop/db-0', 'c', '/dev/sda', 'writeBytes', 30e6),
      podsSeen(1, 'n2'),
      n2('web-2', -1),
    ];
    const { source } = await readAttribution(
      { pods: vector(pods), devices: vector([...DISKS, ...disk('sda', SDA, 'n2')]), psi: { n1: 60, n2: 60 } },
      ['n1', 'n2'],
    );
    expect(source.read('n1')?.attribution?.consumers[0]?.name).to.equal('db-0');
    expect(source.read('n2')?.attribution).to.equal(undefined);
    expect(source.read('n2')?.psiSomeAvg10Percent).to.equal(60);
  });

  it('does not ask who does the IO while every node is quiet, and attributes only the pressed ones', async () => {
    const pods = vector([podsSeen(1), io('shop/db-0', 'c', '/dev/sda', 'writeBytes', 30e6)]);
    const quiet = await readAttribution({ pods, devices: vector(DISKS), psi: { n1: 3 } });
    expect(quiet.asked).to.have.length(Object.keys(QUERIES).length);
    expect(quiet.attribution).to.equal(undefined);

    const n2Pods = vector([
      podsSeen(1),
      io('shop/db-0', 'c', '/dev/sda', 'writeBytes', 30e6),
      podsSeen(1, 'n2'),
      [
        {
          instance: 'n2:10250',
          namespace: 'a',
          pod: 'b',
          container: 'c',
          device: '/dev/sda',
          measure: 'writeBytes',
        },
        9e6,
      ],
    ]);
    const mixed = await readAttribution(
      { pods: n2Pods, devices: vector([...DISKS, ...disk('sda', SDA, 'n2')]), psi: { n1: 3, n2: 60 } },
      ['n1', 'n2'],
    );
    expect(mixed.asked).to.include.members([queries.pods, queries.devices]);
    expect(mixed.source.read('n1')?.attribution, 'an idle node gets none').to.equal(undefined);
    expect(mixed.source.read('n2')?.attribution?.consumers[0]?.name).to.equal('b');
  });

  it('asks for both cAdvisor byte families and ops, grouped by the node label, and for node_exporter by device', () => {
    const q = attributionQueries('node') ?? expect.fail('node is a label name');
    for (const metric of [
      'container_fs_reads_bytes_total',
      'container_fs_writes_bytes_total',
      'container_fs_reads_total',
      'container_fs_writes_total',
      'container_blkio_device_usage_total{pod!="",operation="Read"}',
      'container_blkio_device_usage_total{pod!="",operation="Write"}',
    ])
      expect(q.pods).to.include(metric);
    expect(q.pods).to.include('max by (node, namespace, pod, container, device, measure)');
    expect(q.pods).to.include('count by (node) (count by (node, namespace, pod)');
    for (const metric of [
      'io_time_seconds',
      'read_bytes',
      'written_bytes',
      'reads_completed',
      'writes_completed',
    ])
      expect(q.devices).to.include(`node_disk_${metric}_total{device!~`);
    expect(q.devices).to.match(/^max by \(node, device, measure\)/);
    expect(attributionQueries('node"}) or vector(1'), 'not a label name: no query').to.equal(undefined);
  });
});
