import { KubernetesObjectApi, Watch, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { isDeepStrictEqual } from 'node:util';
import { jitteredDelay } from '../runtime/backoff.js';
import { describeError, isGone, isTooManyRequests } from './errors.js';

/** An object as the API sends it: list results are deserialised by client-node, watch events are raw JSON. */
export type RawObject = KubernetesObject & Record<string, unknown>;

export type ChangeType = 'add' | 'update' | 'delete';
export type ChangeHandler<T> = (
  type: ChangeType,
  key: string,
  current: T | undefined,
  previous: T | undefined,
) => void;

export interface InformerLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

export interface InformerOptions<T> {
  /** Name for logs and metrics, e.g. "pods". */
  name: string;
  kc: KubeConfig;
  apiVersion: string;
  kind: string;
  /** The collection path to watch, e.g. /api/v1/pods (/api/v1/namespaces/NS/pods for one namespace). */
  path: string;
  /** List one namespace only (the path names it for the watch). */
  namespace?: string;
  fieldSelector?: string;
  labelSelector?: string;
  /** The slim view kept in the cache; undefined drops the object (noise filtered before it is stored). */
  transform(raw: RawObject): T | undefined;
  logger: InformerLogger;
  pageSize?: number;
  watchTimeoutSeconds?: number;
  /**
   * A watch that delivers nothing, not even a bookmark, for this long is taken for a dead connection (a
   * half-open TCP stream never ends by itself) and restarted from its resourceVersion. The apiserver sends a
   * bookmark about once a minute to a watch that asked for them. Default 150 s.
   */
  watchSilenceMs?: number;
  onRestart?(reason: string): void;
  /**
   * Its list or watch got through again after an error: the apiserver is back. The cache wakes its other informers
   * then (retryNow), so none sits out the rest of a backoff that grew while the apiserver was gone.
   */
  onRecovered?(): void;
  /** Stand-ins for the API calls, for tests that fail them without a network. */
  api?: Pick<KubernetesObjectApi, 'list'>;
  watcher?: Pick<Watch, 'watch'>;
}

class WatchExpired extends Error {}
class WatchSilent extends Error {}

export const DEFAULT_WATCH_SILENCE_MS = 150_000;

/**
 * List + watch into a read-only cache of slim views. Resumes the watch from the last resourceVersion,
 * relists when it has expired (410 Gone), and restarts itself with jittered backoff on any other error, which
 * client-node 1.x's own informer does not do (it stops).
 */
export class Informer<T> {
  private readonly store = new Map<string, T>();
  /** resourceVersion of each stored object, kept beside the views so an unchanged view stays silent. */
  private readonly versions = new Map<string, string>();
  private readonly handlers: ChangeHandler<T>[] = [];
  private resourceVersion: string | undefined;
  /** Ends the watch under way (aborting its request when it has been established). */
  private cancelWatch: (() => void) | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;
  private hurry: (() => void) | undefined;
  /** An error was caught since the last working list or watch. */
  private failed = false;
  private attempt = 0;
  private markSynced!: () => void;
  /** Resolves once the first list has been stored. */
  readonly synced = new Promise<void>((resolve) => (this.markSynced = resolve));
  private hasSynced = false;
  private watching = false;
  /** Since when the informer has had no working list or watch (performance.now()); undefined when it has. */
  private disconnectedSince: number | undefined = performance.now();
  private api: Pick<KubernetesObjectApi, 'list'> | undefined;
  private loop: Promise<void> | undefined;

  constructor(private readonly options: InformerOptions<T>) {}

  get name(): string {
    return this.options.name;
  }

  isSynced(): boolean {
    return this.hasSynced;
  }

  /** Synced, and not failed since: false from a caught error until the next list or watch gets through. */
  isWatching(): boolean {
    return this.hasSynced && this.watching;
  }

  /** How long the informer has been without a working list or watch (0 when it has one). */
  disconnectedMs(now = performance.now()): number {
    return this.disconnectedSince === undefined ? 0 : now - this.disconnectedSince;
  }

  private setWatching(watching: boolean): void {
    this.watching = watching;
    if (watching) this.disconnectedSince = undefined;
    else this.disconnectedSince ??= performance.now();
  }

  /**
   * A list, or a watch event that is not an error, got through after a failure: the apiserver answers again. A watch
   * merely established does not count: with etcd down it is established and then fails, and two informers waking
   * each other on that would retry at the pace of a round trip.
   */
  private answered(): void {
    if (!this.failed) return;
    this.failed = false;
    this.options.onRecovered?.();
  }

  /**
   * Cuts a backoff wait under way short, to a moment within half a second (jittered: the informers woken together do
   * not all ask at once), once per wait; does nothing otherwise.
   */
  retryNow(): void {
    this.hurry?.();
  }

  onChange(handler: ChangeHandler<T>): void {
    this.handlers.push(handler);
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  /** The resourceVersion of the object as last seen, for read-your-writes fences. */
  versionOf(key: string): string | undefined {
    return this.versions.get(key);
  }

  values(): IterableIterator<T> {
    return this.store.values();
  }

  get size(): number {
    return this.store.size;
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.cancelWatch?.(); // settles the watch under way, established or still waiting for an answer
    this.wake?.();
    await this.loop;
  }

  private isStopped(): boolean {
    return this.stopped;
  }

  private async run(): Promise<void> {
    let relist = true;
    while (!this.stopped) {
      try {
        if (relist) await this.list();
        relist = false;
        await this.watch();
      } catch (err) {
        if (this.isStopped()) break;
        this.setWatching(false);
        if (err instanceof WatchSilent) {
          // Not an error of the apiserver's: resume from the same resourceVersion at once.
          this.options.onRestart?.('silent');
          this.options.logger.warn('Restarting a silent watch', {
            informer: this.name,
            silentForMs: this.silenceMs(),
          });
          continue;
        }
        const expired = err instanceof WatchExpired || isGone(err);
        // A failed list is retried as a list: a watch alone never syncs the cache, so /readyz would stay 503.
        relist ||= expired;
        if (err instanceof WatchExpired) {
          this.options.logger.info('Relisting after the watch expired', { informer: this.name });
          continue;
        }
        // 429: the apiserver is busy (or still starting): come back soon rather than after a long backoff.
        const delay = isTooManyRequests(err)
          ? 500 + Math.random() * 1000
          : jitteredDelay(this.attempt++, 500, 10_000);
        this.options.onRestart?.(expired ? 'expired' : 'error');
        this.options.logger.warn('Restarting informer after an error', {
          informer: this.name,
          error: describeError(err),
          retryInMs: Math.round(delay),
        });
        this.failed = true;
        await new Promise<void>((resolve) => {
          let timer = setTimeout(resolve, delay);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
          this.hurry = () => {
            this.hurry = undefined;
            clearTimeout(timer);
            timer = setTimeout(resolve, Math.min(delay, 100 + Math.random() * 400));
          };
        });
        this.wake = undefined;
        this.hurry = undefined;
      }
    }
  }

  private async list(): Promise<void> {
    const api = (this.api ??= this.options.api ?? KubernetesObjectApi.makeApiClient(this.options.kc));
    const fresh = new Map<string, T>();
    const freshVersions = new Map<string, string | undefined>();
    let continueToken: string | undefined;
    let resourceVersion: string | undefined;
    do {
      const page = await api.list<RawObject>(
        this.options.apiVersion,
        this.options.kind,
        this.options.namespace,
        undefined,
        undefined,
        undefined,
        this.options.fieldSelector,
        this.options.labelSelector,
        this.options.pageSize ?? 500,
        continueToken,
      );
      for (const item of page.items) {
        const view = this.options.transform(item);
        if (view === undefined) continue;
        fresh.set(keyOf(item), view);
        freshVersions.set(keyOf(item), item.metadata?.resourceVersion);
      }
      continueToken = page.metadata?._continue || undefined;
      resourceVersion = page.metadata?.resourceVersion;
    } while (continueToken);

    this.versions.clear();
    for (const [key, version] of freshVersions) if (version) this.versions.set(key, version);
    for (const [key, previous] of this.store) {
      if (!fresh.has(key)) {
        this.store.delete(key);
        this.emit('delete', key, undefined, previous);
      }
    }
    for (const [key, view] of fresh) this.upsert(key, view);
    this.resourceVersion = resourceVersion;
    this.attempt = 0;
    this.setWatching(true);
    this.answered();
    if (!this.hasSynced) {
      this.hasSynced = true;
      this.markSynced();
      this.options.logger.info('Synced informer', { informer: this.name, objects: this.store.size });
    }
  }

  private silenceMs(): number {
    return this.options.watchSilenceMs ?? DEFAULT_WATCH_SILENCE_MS;
  }

  private watch(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      // This watch's own controller: client-node hands it over only once the response headers arrive, so a
      // request that never gets them cannot be aborted; it is abandoned (and aborted if it ever answers).
      let controller: AbortController | undefined;
      // Armed before the request: a connection that never answers is as silent as one that stopped.
      let silence: NodeJS.Timeout | undefined;
      const finish = (err?: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(silence);
        this.cancelWatch = undefined;
        controller?.abort();
        if (err) reject(err instanceof Error ? err : new Error(describeError(err)));
        else resolve();
      };
      const quiet = () => {
        if (settled) return;
        clearTimeout(silence);
        silence = setTimeout(() => {
          finish(new WatchSilent(`watch of ${this.name} silent for ${this.silenceMs()} ms`));
        }, this.silenceMs());
        silence.unref();
      };
      quiet();
      this.cancelWatch = () => {
        finish();
      };
      const query: Record<string, string | number | boolean> = {
        allowWatchBookmarks: true,
        timeoutSeconds: this.options.watchTimeoutSeconds ?? 300,
      };
      if (this.resourceVersion) query.resourceVersion = this.resourceVersion;
      if (this.options.fieldSelector) query.fieldSelector = this.options.fieldSelector;
      if (this.options.labelSelector) query.labelSelector = this.options.labelSelector;
      (this.options.watcher ?? new Watch(this.options.kc))
        .watch(
          this.options.path,
          query,
          (phase: string, object: RawObject) => {
            if (settled) return; // an abandoned stream must not touch the cache a newer watch feeds
            quiet();
            try {
              this.onWatchEvent(phase, object);
              this.attempt = 0; // the stream delivers: the next failure starts the backoff afresh
              this.answered();
            } catch (err) {
              finish(err); // aborts too: client-node then calls done() with an AbortError, which is ignored
            }
          },
          (err: unknown) => {
            finish(err ?? undefined);
          },
        )
        .then((established) => {
          controller = established;
          // client-node resolves even when the request failed, after calling done(): that is no watch.
          if (settled || this.stopped) {
            established.abort();
            return;
          }
          this.setWatching(true);
        })
        .catch(finish);
    });
  }

  private onWatchEvent(phase: string, object: RawObject): void {
    if (phase === 'ERROR') {
      const code = (object as { code?: unknown }).code;
      if (code === 410) throw new WatchExpired(`watch of ${this.name} expired`);
      throw new Error(`watch of ${this.name} failed: ${JSON.stringify(object)}`);
    }
    const rv = object.metadata?.resourceVersion;
    if (rv) this.resourceVersion = rv;
    if (phase === 'BOOKMARK') return;
    const key = keyOf(object);
    if (rv && phase !== 'DELETED') this.versions.set(key, rv);
    else this.versions.delete(key);
    if (phase === 'DELETED') {
      const previous = this.store.get(key);
      if (previous === undefined) return;
      this.store.delete(key);
      this.emit('delete', key, undefined, previous);
      return;
    }
    const view = this.options.transform(object);
    if (view === undefined) {
      // Not kept, so its version is not either: an informer that drops most of what it sees (the Events of reason
      // Failed) would otherwise keep one entry for each until the next relist.
      this.versions.delete(key);
      const previous = this.store.get(key);
      if (previous === undefined) return;
      this.store.delete(key);
      this.emit('delete', key, undefined, previous);
      return;
    }
    this.upsert(key, view);
  }

  private upsert(key: string, view: T): void {
    const previous = this.store.get(key);
    if (previous !== undefined && isDeepStrictEqual(previous, view)) return; // nothing the cache keeps changed
    this.store.set(key, view);
    this.emit(previous === undefined ? 'add' : 'update', key, view, previous);
  }

  private emit(type: ChangeType, key: string, current: T | undefined, previous: T | undefined): void {
    for (const handler of this.handlers) handler(type, key, current, previous);
  }
}

export function keyOf(object: KubernetesObject): string {
  const { namespace, name = '' } = object.metadata ?? {};
  return namespace ? `${namespace}/${name}` : name;
}
