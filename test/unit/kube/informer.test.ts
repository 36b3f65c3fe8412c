import {
  ApiException,
  KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type KubernetesObjectApi,
  type Watch,
} from '@kubernetes/client-node';
import { expect } from 'chai';
import { setTimeout as sleep } from 'node:timers/promises';
import { Informer, type InformerOptions, type RawObject } from '../../../src/kube/informer.js';

const refused = () =>
  Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), { code: 'ECONNREFUSED' });
const reset = () => Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
const tooMany = () => new ApiException(429, 'Too Many Requests', '{"reason":"TooManyRequests"}', {});
// client-node's Watch reports a failed request as a plain Error carrying statusCode.
const gone = () => Object.assign(new Error('Gone'), { statusCode: 410 });

const pod = (name: string, resourceVersion = '1'): RawObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace: 'ns', resourceVersion },
});

interface Page {
  resourceVersion: string;
  items: RawObject[];
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

interface WatchHandle {
  resourceVersion: string | undefined;
  send(phase: string, object: unknown): void;
  end(err?: unknown): void;
  /** Lets a request that was told to 'hang' get its response. */
  establish(): void;
}

/**
 * The apiserver as the informer's two calls see it, scripted per call: a list answers with a page, an error or a
 * page the test hands over later; a watch is established, hangs until the test establishes it, or fails the way
 * client-node's Watch fails a request (done(err) after the response, then it resolves anyway).
 */
class FakeApiServer {
  readonly calls: string[] = [];
  readonly watches: WatchHandle[] = [];
  readonly lists: (Page | Error | Promise<Page>)[] = [];
  /** How each watch request goes; unscripted ones are established at once. */
  readonly watchRequests: ('establish' | 'hang' | Error)[] = [];

  readonly api: Pick<KubernetesObjectApi, 'list'> = {
    list: async <T extends KubernetesObject>(): Promise<KubernetesListObject<T>> => {
      this.calls.push('list');
      const step = this.lists.shift();
      if (step === undefined) throw new Error('unscripted list');
      if (step instanceof Error) throw step;
      const page = await step;
      return { metadata: { resourceVersion: page.resourceVersion }, items: page.items as unknown as T[] };
    },
  };

  readonly watcher: Pick<Watch, 'watch'> = {
    watch: async (_path, query, callback, done) => {
      const resourceVersion = query.resourceVersion as string | undefined;
      this.calls.push(`watch from ${resourceVersion ?? 'now'}`);
      const controller = new AbortController();
      let ended = false;
      const end = (err?: unknown) => {
        if (ended) return;
        ended = true;
        done(err ?? null);
      };
      controller.signal.addEventListener('abort', () => {
        end(new Error('aborted'));
      });
      const established = deferred<undefined>();
      this.watches.push({
        resourceVersion,
        send: (phase, object) => {
          callback(phase, object);
        },
        end,
        establish: () => {
          established.resolve(undefined);
        },
      });
      const request = this.watchRequests.shift();
      if (request === 'hang') await established.promise;
      else await Promise.resolve(); // the response arrives after watch() was called, as fetch's does
      if (request instanceof Error) end(request);
      return controller;
    },
  };
}

async function until(what: string, check: () => boolean, server: FakeApiServer): Promise<void> {
  const deadline = Date.now() + 3000;
  while (!check()) {
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; calls: ${server.calls.join(', ')}`);
    await sleep(1);
  }
}

describe('Informer', () => {
  const random = Math.random;
  let server: FakeApiServer;
  let informer: Informer<RawObject>;
  let restarts: string[];

  // No jitter: a retry after an error comes at once (a 429 still waits its 500 ms).
  before(() => (Math.random = () => 0));
  after(() => (Math.random = random));

  /** An informer of pods over the fake apiserver, recording its restarts. */
  const podInformer = (options: Partial<InformerOptions<RawObject>> = {}) =>
    new Informer<RawObject>({
      name: 'pods',
      kc: new KubeConfig(),
      apiVersion: 'v1',
      kind: 'Pod',
      path: '/api/v1/pods',
      transform: (raw) => raw,
      logger: { info: () => undefined, warn: () => undefined },
      onRestart: (reason) => restarts.push(reason),
      api: server.api,
      watcher: server.watcher,
      ...options,
    });

  beforeEach(() => {
    server = new FakeApiServer();
    restarts = [];
    informer = podInformer();
  });

  afterEach(async () => {
    for (const watch of server.watches) watch.establish();
    await informer.stop();
  });

  it('retries a failed first list as a list until one succeeds, then syncs and watches from it', async () => {
    server.lists.push(refused(), tooMany(), { resourceVersion: '5', items: [pod('a')] });
    informer.start();

    await until('the first watch', () => server.watches.length === 1, server);
    expect(server.calls).to.deep.equal(['list', 'list', 'list', 'watch from 5']);
    expect(restarts).to.deep.equal(['error', 'error']);
    expect(informer.isSynced()).to.equal(true);
    expect(informer.get('ns/a')).to.not.equal(undefined);
  });

  it('resumes a failed watch from the last resourceVersion and relists when it expired', async () => {
    server.lists.push(
      { resourceVersion: '5', items: [pod('a')] },
      { resourceVersion: '9', items: [pod('a'), pod('b', '6')] },
      { resourceVersion: '12', items: [pod('b', '6')] },
    );
    informer.start();
    await until('the first watch', () => server.watches.length === 1, server);

    server.watches[0]!.send('ADDED', pod('b', '6'));
    server.watches[0]!.end(reset());
    await until('the resumed watch', () => server.watches.length === 2, server);
    server.watches[1]!.send('ERROR', { kind: 'Status', code: 410, reason: 'Expired' });
    await until('the watch after the relist', () => server.watches.length === 3, server);
    server.watches[2]!.end(gone());
    await until('the watch after the second relist', () => server.watches.length === 4, server);

    expect(server.calls).to.deep.equal([
      'list',
      'watch from 5',
      'watch from 6',
      'list',
      'watch from 9',
      'list',
      'watch from 12',
    ]);
    expect(restarts).to.deep.equal(['error', 'expired']);
    expect([...informer.values()].map((p) => p.metadata?.name)).to.deep.equal(['b']);
  });

  it('watches only once synced, and not from a caught error until a list or a watch gets through again', async () => {
    const relist = deferred<Page>();
    server.lists.push(refused(), relist.promise);
    server.watchRequests.push('establish', refused(), 'hang');
    expect(informer.isWatching(), 'before start').to.equal(false);
    informer.start();

    await until('the second list', () => server.calls.length === 2, server);
    expect(informer.isWatching(), 'while the first list fails').to.equal(false);
    relist.resolve({ resourceVersion: '5', items: [] });
    await until('the first watch request', () => server.watches.length === 1, server);
    expect(informer.isWatching(), 'once listed').to.equal(true);

    server.watches[0]!.end(reset());
    await until('the third watch request', () => server.watches.length === 3, server);
    expect(informer.isWatching(), 'while its watch request fails and the next hangs').to.equal(false);
    server.watches[2]!.establish();
    await until('the watch to be established', () => informer.isWatching(), server);
    expect(server.calls).to.deep.equal(['list', 'list', 'watch from 5', 'watch from 5', 'watch from 5']);
  });

  describe('a silent watch', () => {
    let silent: Informer<RawObject>;
    beforeEach(async () => {
      await informer.stop();
      silent = podInformer({ watchSilenceMs: 150 });
      informer = silent; // the outer afterEach stops it
    });

    it('is restarted from its resourceVersion when nothing, not even a bookmark, arrives within the bound', async () => {
      server.lists.push({ resourceVersion: '5', items: [pod('a')] });
      silent.start();
      await until('the first watch', () => server.watches.length === 1, server);
      server.watches[0]!.send('ADDED', pod('b', '7'));
      await until('a second watch after the silence', () => server.watches.length === 2, server);
      expect(restarts).to.deep.equal(['silent']);
      expect(server.calls.slice(0, 3)).to.deep.equal(['list', 'watch from 5', 'watch from 7']);
      expect(silent.isSynced()).to.equal(true);
    });

    it('is not restarted while bookmarks keep arriving', async () => {
      server.lists.push({ resourceVersion: '5', items: [] });
      silent.start();
      await until('the first watch', () => server.watches.length === 1, server);
      // Twice the silence bound in all, a bookmark every 20 ms: a generous margin on a loaded machine.
      for (let i = 0; i < 15; i++) {
        server.watches[0]!.send('BOOKMARK', { metadata: { resourceVersion: String(6 + i) } });
        await sleep(20);
      }
      expect(server.watches).to.have.length(1);
      expect(restarts).to.deep.equal([]);
    });

    it('is restarted when the watch request itself never gets an answer, and counts as disconnected', async () => {
      server.lists.push({ resourceVersion: '5', items: [] });
      server.watchRequests.push('hang');
      silent.start();
      await until('a second watch after the hung one', () => server.watches.length === 2, server);
      expect(restarts).to.deep.equal(['silent']);
      // Synced, and connected again now: the second watch was established at once.
      await until('the watch to be established', () => silent.isWatching(), server);
      expect(silent.disconnectedMs()).to.equal(0);
    });

    it('stops at once, even while a watch request is waiting for an answer', async () => {
      server.lists.push({ resourceVersion: '5', items: [] });
      server.watchRequests.push('hang');
      silent.start();
      await until('the hung watch request', () => server.watches.length === 1, server);
      const started = performance.now();
      await silent.stop();
      expect(performance.now() - started).to.be.below(100); // not the 150 ms silence bound
      expect(server.watches).to.have.length(1);
    });
  });

  it('measures how long it has been disconnected, and resets once a watch gets through', async () => {
    server.lists.push({ resourceVersion: '5', items: [] });
    server.watchRequests.push(reset(), 'hang');
    informer.start();
    await until('the second watch request', () => server.watches.length === 2, server);
    await sleep(30);
    expect(informer.disconnectedMs()).to.be.at.least(25);
    server.watches[1]!.establish();
    await until('the watch to be established', () => informer.isWatching(), server);
    expect(informer.disconnectedMs()).to.equal(0);
  });
  it('says once that it recovered after an error, not on a first list that went through', async () => {
    const recovered: string[] = [];
    informer = podInformer({
      onRecovered: () => recovered.push(`after ${server.calls.length} calls`),
    });
    server.lists.push({ resourceVersion: '5', items: [] }, refused(), { resourceVersion: '6', items: [] });
    server.watchRequests.push('establish', 'establish');
    informer.start();
    await until('the first watch', () => server.watches.length === 1, server);
    expect(recovered, 'a healthy start').to.deep.equal([]);
    server.watches[0]!.end(gone()); // relists: the first relist fails, the second goes through
    await until('the second watch', () => server.watches.length === 2, server);
    expect(recovered).to.deep.equal(['after 4 calls']);
  });

  it('counts a watch as an answer only once it delivers an event: established and failing is no recovery', async () => {
    const recovered: number[] = [];
    informer = podInformer({
      onRecovered: () => recovered.push(server.watches.length),
    });
    server.lists.push({ resourceVersion: '5', items: [] });
    informer.start();
    await until('the first watch', () => server.watches.length === 1, server);
    server.watches[0]!.end(reset());
    await until('the second watch', () => server.watches.length === 2, server);
    server.watches[1]!.send('ERROR', { code: 500, message: 'etcdserver: request timed out' });
    await until('the third watch', () => server.watches.length === 3, server);
    expect(recovered, 'established watches, one failing at once').to.deep.equal([]);
    server.watches[2]!.send('ADDED', pod('a', '6'));
    expect(recovered).to.deep.equal([3]);
  });

  it('cuts a backoff short when told to retry now (a sibling informer got through)', async () => {
    Math.random = () => 1; // full backoffs: 1.5 s after a 429
    try {
      server.lists.push(tooMany(), { resourceVersion: '5', items: [] });
      informer.start();
      await until('the first failure', () => restarts.length === 1, server);
      const asked = performance.now();
      informer.retryNow();
      await until('the second list', () => server.calls.length >= 2, server);
      // Within half a second (jittered), not the 1.5 s the 429 asked for.
      expect(performance.now() - asked, 'ms to the retry').to.be.below(1100);
    } finally {
      Math.random = () => 0;
    }
  });

  it('keeps no version of an object its transform drops', async () => {
    informer = podInformer({
      transform: (raw) => (raw.metadata?.name?.startsWith('kept') ? raw : undefined),
    });
    server.lists.push({ resourceVersion: '5', items: [pod('dropped-0'), pod('kept-0')] });
    informer.start();
    await until('the first watch', () => server.watches.length === 1, server);
    server.watches[0]!.send('ADDED', pod('dropped-1', '7'));
    server.watches[0]!.send('ADDED', pod('kept-1', '8'));
    expect(informer.versionOf('ns/dropped-0')).to.equal(undefined);
    expect(informer.versionOf('ns/dropped-1')).to.equal(undefined);
    expect(informer.versionOf('ns/kept-1')).to.equal('8');
  });
});
