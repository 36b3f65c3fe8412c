// Issue 12: a flood of 50,000 FailedCreatePodSandBox Events. Fed through the cache's own informers (list, then watch
// events as client-node delivers them), with the API calls stood in: the cache stays within its caps, and detection
// still finds a pod stuck for its cause.
import { KubeConfig, type KubernetesObjectApi, type Watch } from '@kubernetes/client-node';
import { expect } from 'chai';
import { setTimeout as sleep } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';
import {
  detectNodeFindings,
  detectStuckPods,
  MAX_FAILURE_MESSAGE_CHARS,
  type EventView,
} from '../../../src/detection/index.js';
import { InformerCache } from '../../../src/kube/cluster-cache.js';
import {
  FailureEventCaps,
  MAX_EVENTS_ABOUT_UNCACHED_PODS,
  MAX_EVENTS_PER_POD,
} from '../../../src/kube/failure-event-caps.js';
import type { RawObject } from '../../../src/kube/informer.js';
import { silentLogger } from '../../../src/observability/logger.js';

const T0 = new Date('2026-11-30T10:00:00Z');
const NOW = new Date(T0.getTime() + 3_600_000);
const SANDBOX = '/api/v1/events?reason=FailedCreatePodSandBox,involvedObject.kind=Pod';
const PODS = '/api/v1/pods?status.phase=Pending,spec.nodeName!=';
const IO_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded';
const NETWORK_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network';

const uidOf = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;

interface PodSpec {
  name: string;
  uid: string;
  node: string;
}
const rawPod = ({ name, uid, node }: PodSpec): RawObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'shop', uid, creationTimestamp: T0, resourceVersion: '1' },
  spec: { nodeName: node },
  status: {
    phase: 'Pending',
    conditions: [{ type: 'PodScheduled', status: 'True', lastTransitionTime: T0.toISOString() }],
    containerStatuses: [{ name: 'app', state: { waiting: { reason: 'ContainerCreating' } } }],
  },
});
const rawNode = (name: string): RawObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name, uid: `node-${name}`, resourceVersion: '1' },
  status: { conditions: [{ type: 'Ready', status: 'True' }] },
});
let serial = 0;
/** kubelet's Event about a pod, from the pod's node (any node, for a pod the cache never holds). */
const rawEvent = (
  pod: Pick<PodSpec, 'name' | 'uid'> & { node?: string },
  message = IO_MESSAGE,
): RawObject => ({
  apiVersion: 'v1',
  kind: 'Event',
  metadata: {
    name: `${pod.name}.${(++serial).toString(16)}`,
    namespace: 'shop',
    uid: `e${serial}`,
    resourceVersion: String(serial),
  },
  involvedObject: { kind: 'Pod', namespace: 'shop', name: pod.name, uid: pod.uid },
  reason: 'FailedCreatePodSandBox',
  type: 'Warning',
  message,
  source: { component: 'kubelet', host: pod.node ?? 'n0' },
  count: 1,
  lastTimestamp: new Date(T0.getTime() + serial).toISOString(),
});

type Callback = (phase: string, object: unknown) => void;

/** The apiserver as the cache's informers call it: lists of what it holds, and watches the test sends to. */
class FakeApiServer {
  readonly objects = new Map<string, RawObject[]>();
  readonly watches = new Map<string, Callback>();

  /** How long a list of a kind takes to answer, in ms. */
  readonly listDelays = new Map<string, number>();
  /** Continue tokens whose page fails once (a list that fails part way), and what happens meanwhile. */
  readonly failingPages = new Map<string, () => void>();

  readonly api = {
    list: (...args: unknown[]) => {
      const [, kind, , , , , selector, , limit, token] = args as [string, string, ...unknown[]] as [
        string,
        string,
        unknown,
        unknown,
        unknown,
        unknown,
        string?,
        string?,
        number?,
        string?,
      ];
      const failing = token === undefined ? undefined : this.failingPages.get(token);
      if (token && failing) {
        this.failingPages.delete(token);
        failing();
        return Promise.reject(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
      }
      const path = { Pod: 'pods', Node: 'nodes', Event: 'events' }[kind] ?? kind;
      const all = this.objects.get(`/api/v1/${path}?${selector ?? ''}`) ?? [];
      const start = Number(token ?? 0);
      const end = start + (limit ?? all.length);
      const page = {
        metadata: { resourceVersion: '1', ...(end < all.length ? { _continue: String(end) } : {}) },
        items: all.slice(start, end),
      };
      return sleep(this.listDelays.get(kind) ?? 0).then(() => page);
    },
  } as unknown as Pick<KubernetesObjectApi, 'list'>;

  readonly watcher: Pick<Watch, 'watch'> = {
    watch: (path, query, callback) => {
      const selector = typeof query.fieldSelector === 'string' ? query.fieldSelector : '';
      this.watches.set(`${path}?${selector}`, callback);
      return Promise.resolve(new AbortController());
    },
  };

  send(watch: string, phase: string, object: RawObject): void {
    const callback = this.watches.get(watch);
    if (!callback) throw new Error(`no watch on ${watch}`);
    callback(phase, object);
  }
}

async function startCache(server: FakeApiServer): Promise<InformerCache> {
  const cache = new InformerCache({
    kc: new KubeConfig(),
    logger: silentLogger,
    api: server.api,
    watcher: server.watcher,
  });
  cache.start();
  await cache.waitForSync();
  // A list is followed by its watch; wait until the Event watch is there to send to.
  for (let i = 0; i < 200 && !server.watches.has(SANDBOX); i++) await sleep(5);
  return cache;
}

/** Stuck pods and node findings as the reconciler detects them (policy-reconciler observe()). */
function detect(cache: InformerCache, nodes: string[]) {
  const stuck = detectStuckPods(
    nodes.flatMap((n) => cache.pendingPodsOn(n)),
    cache.failureEventsByPod(),
    { stuckThresholdSeconds: 180, now: NOW },
  );
  return { stuck, findings: detectNodeFindings(stuck, nodes, 1) };
}

const heldEvents = (cache: InformerCache): EventView[] => [
  ...cache.sandboxEvents.values(),
  ...cache.failedEvents.values(),
];
const heldBytes = (cache: InformerCache) =>
  heldEvents(cache).reduce((sum, e) => sum + JSON.stringify(e).length, 0);

describe('the cache in a flood of 50,000 sandbox failure Events', function () {
  this.timeout(20_000);
  const NODES = ['n0', 'n1', 'n2', 'n3', 'n4'];

  it(`keeps ${MAX_EVENTS_PER_POD} per pod of 50,000 about 50 stuck pods, and still finds a newly stuck pod's cause`, async () => {
    const server = new FakeApiServer();
    const pods = Array.from({ length: 51 }, (_, i) => ({
      name: `web-${i}`,
      uid: uidOf(i + 1),
      node: NODES[i % NODES.length] ?? 'n0',
    }));
    const [victim, ...flooded] = pods as [PodSpec, ...PodSpec[]];
    server.objects.set(PODS, pods.map(rawPod));
    server.objects.set('/api/v1/nodes?', NODES.map(rawNode));
    const cache = await startCache(server);

    for (let i = 0; i < 50_000; i++) {
      const pod = flooded[i % flooded.length] as PodSpec;
      server.send(SANDBOX, 'ADDED', rawEvent(pod));
    }
    expect(cache.sandboxEvents.size).to.equal(50 * MAX_EVENTS_PER_POD);
    expect(cache.failureEventCaps.size).to.deep.equal({
      events: 50 * MAX_EVENTS_PER_POD,
      uncached: 0,
      pods: 50,
    });
    for (const events of cache.failureEventsByPod().values())
      expect(events.length).to.be.at.most(MAX_EVENTS_PER_POD);

    // kubelet's next failure of a pod that is stuck now: another cause, and it is the latest.
    server.send(SANDBOX, 'ADDED', rawEvent(victim, NETWORK_MESSAGE));
    const { stuck, findings } = detect(cache, NODES);
    const found = stuck.find((s) => s.pod.uid === victim.uid);
    expect(found).to.include({ cause: 'Network', failureCount: 1, nodeName: victim.node });
    expect(findings.get(victim.node)?.stuckPods.map((s) => s.pod.name)).to.include(victim.name);
    // The flooded pods: their cause, from what was kept, and a count that is a lower bound.
    for (const pod of flooded) {
      expect(stuck.find((s) => s.pod.uid === pod.uid)).to.include({
        cause: 'DeadlineExceeded',
        failureCount: MAX_EVENTS_PER_POD,
      });
    }
    await cache.stop();
  });

  it(`keeps ${MAX_EVENTS_ABOUT_UNCACHED_PODS} of 50,000 about 50,000 pods it does not hold, none crowding out a stuck pod's`, async () => {
    const server = new FakeApiServer();
    const victim = { name: 'db-0', uid: uidOf(1), node: 'n1' };
    server.objects.set(PODS, [rawPod(victim)]);
    server.objects.set('/api/v1/nodes?', NODES.map(rawNode));
    const cache = await startCache(server);

    for (let i = 0; i < 50_000; i++) {
      server.send(SANDBOX, 'ADDED', rawEvent({ name: `gone-${i}`, uid: uidOf(1_000_000 + i) }));
    }
    expect(cache.sandboxEvents.size).to.equal(MAX_EVENTS_ABOUT_UNCACHED_PODS);
    expect(cache.failureEventCaps.size.uncached).to.equal(MAX_EVENTS_ABOUT_UNCACHED_PODS);
    const bytes = heldBytes(cache);
    expect(bytes).to.be.below(MAX_EVENTS_ABOUT_UNCACHED_PODS * 1024);

    server.send(SANDBOX, 'ADDED', rawEvent(victim));
    expect(cache.sandboxEvents.size).to.equal(MAX_EVENTS_ABOUT_UNCACHED_PODS + 1);
    const { stuck } = detect(cache, NODES);
    expect(stuck.map((s) => [s.pod.name, s.cause])).to.deep.equal([['db-0', 'DeadlineExceeded']]);
    await cache.stop();
  });

  it('keeps the head of each 1 MB message in memory, not the message', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const heap = () => {
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    const server = new FakeApiServer();
    const pods = Array.from({ length: 41 }, (_, i) => ({ name: `big-${i}`, uid: uidOf(i + 1), node: 'n0' }));
    server.objects.set(PODS, pods.map(rawPod));
    server.objects.set('/api/v1/nodes?', [rawNode('n0')]);
    const cache = await startCache(server);
    // As a watch delivers it: parsed from JSON, so each message is a string of its own.
    const send = (pod: PodSpec) => {
      server.send(
        SANDBOX,
        'ADDED',
        JSON.parse(JSON.stringify(rawEvent(pod, IO_MESSAGE + 'x'.repeat(1_000_000)))) as RawObject,
      );
    };
    // Measured from the first: V8 keeps the last big string it worked on (about 1 MB), whatever the number of Events.
    send(pods[0] as PodSpec);
    const before = heap();
    for (const pod of pods.slice(1)) send(pod);
    const perEvent = (heap() - before) / (pods.length - 1);
    expect(cache.sandboxEvents.size).to.equal(pods.length);
    for (const event of heldEvents(cache)) expect(event.message.length).to.equal(MAX_FAILURE_MESSAGE_CHARS);
    // Regression: a slice of the message kept V8's whole 1 MB string alive behind it.
    expect(perEvent).to.be.below(64 * 1024);
    await cache.stop();
  });

  it('lists Events once the pods are cached, so that those about cached pods are not held to the other cap', async () => {
    const server = new FakeApiServer();
    const pod = { name: 'web-0', uid: uidOf(1), node: 'n0' };
    server.objects.set(PODS, [rawPod(pod)]);
    server.objects.set('/api/v1/nodes?', [rawNode('n0')]);
    server.objects.set(SANDBOX, [rawEvent(pod), rawEvent({ name: 'gone', uid: uidOf(2) })]);
    server.listDelays.set('Pod', 50);
    const cache = await startCache(server);
    expect(cache.failureEventCaps.size).to.deep.equal({ events: 2, uncached: 1, pods: 2 });
    expect(detect(cache, ['n0']).stuck.map((s) => s.cause)).to.deep.equal(['DeadlineExceeded']);
    await cache.stop();
  });

  it('counts exactly what the informers hold after a relist that failed part way first', async () => {
    const server = new FakeApiServer();
    server.objects.set('/api/v1/nodes?', [rawNode('n0')]);
    const cache = await startCache(server);
    const about = (prefix: string, n: number) =>
      Array.from({ length: n }, (_, i) => rawEvent({ name: `${prefix}-${i}`, uid: uidOf(serial + 1) }));
    const watched = about('w', 100);
    for (const event of watched) server.send(SANDBOX, 'ADDED', event);
    expect(cache.failureEventCaps.size.events).to.equal(100);

    // The watch expires. The relist's second page (of 500) fails once; between the two lists, half of the watched
    // Events and one that the failed list had admitted are deleted.
    const listed = about('l', 600);
    server.objects.set(SANDBOX, [...watched.slice(50), ...listed]);
    server.failingPages.set('500', () =>
      server.objects.set(SANDBOX, [...watched.slice(50), ...listed.slice(1)]),
    );
    const expire = server.watches.get(SANDBOX);
    server.watches.delete(SANDBOX);
    expire?.('ERROR', { kind: 'Status', code: 410 });
    for (let i = 0; i < 400 && !server.watches.has(SANDBOX); i++) await sleep(5);
    expect(server.failingPages.size, 'the failed page was asked for').to.equal(0);
    expect(cache.sandboxEvents.size).to.equal(649);

    server.send(SANDBOX, 'ADDED', rawEvent({ name: 'next', uid: uidOf(999_999) }));
    expect(cache.sandboxEvents.size).to.equal(650);
    expect(cache.failureEventCaps.size).to.deep.equal({ events: 650, uncached: 650, pods: 650 });
    await cache.stop();
  });
});

describe('FailureEventCaps', () => {
  it('admits an Event of a pod up to the cap, and an update of one it holds whatever the count', () => {
    const budget = new FailureEventCaps();
    for (let i = 0; i < MAX_EVENTS_PER_POD; i++) {
      expect(budget.admit('s', `e${i}`, 'pod', true)).to.equal(true);
      budget.reported('s', 'add', `e${i}`);
    }
    expect(budget.admit('s', 'one-more', 'pod', true)).to.equal(false);
    expect(budget.admit('s', 'e0', 'pod', true), 'an update').to.equal(true);
    budget.reported('s', 'delete', 'e0');
    expect(budget.admit('s', 'one-more', 'pod', true), 'after a delete').to.equal(true);
  });

  it('forgets what a list admitted and never stored once the informer has reported a change since', () => {
    const budget = new FailureEventCaps();
    // A list admits 3, then fails on its next page: nothing is stored or reported.
    for (const key of ['a', 'b', 'c']) expect(budget.admit('s', key, `pod-${key}`, false)).to.equal(true);
    expect(budget.size).to.deep.equal({ events: 3, uncached: 3, pods: 3 });
    // The next list admits b and c again (a is gone by then), and stores them.
    for (const key of ['b', 'c']) budget.admit('s', key, `pod-${key}`, false);
    budget.reported('s', 'add', 'b');
    budget.reported('s', 'add', 'c');
    // Another informer's admissions are its own.
    budget.admit('t', 'x', 'pod-x', false);
    // At the next admission, the one never stored stops counting.
    budget.admit('s', 'd', 'pod-d', false);
    budget.reported('s', 'add', 'd');
    expect(budget.size).to.deep.equal({ events: 4, uncached: 4, pods: 4 });
  });

  it('drops a held Event whose change would go over a cap, and moves one to the pod it now names', () => {
    const budget = new FailureEventCaps();
    const fill = (pod: string) => {
      for (let i = 0; i < MAX_EVENTS_PER_POD; i++) {
        budget.admit('s', `${pod}-${i}`, pod, true);
        budget.reported('s', 'add', `${pod}-${i}`);
      }
    };
    fill('full');
    budget.admit('s', 'x', 'other', true);
    budget.reported('s', 'add', 'x');
    expect(budget.admit('s', 'x', 'full', true), 'now about a pod at its cap').to.equal(false);
    expect(budget.admit('s', 'x', 'third', true), 'now about another pod').to.equal(true);
    budget.reported('s', 'update', 'x');
    expect(budget.size).to.deep.equal({ events: MAX_EVENTS_PER_POD + 1, uncached: 0, pods: 2 });
  });
});
