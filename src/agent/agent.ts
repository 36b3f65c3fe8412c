import type { IoLimitReport, IoLimitsAnswer, IoReadingStatus } from '../api/v1alpha1/index.js';
import type { Logger } from '../observability/log.js';
import { isMaterialChange, isQuiet } from '../signals/material-change.js';
import { Attributor, type AttributorOptions } from './attributor.js';
import type { IoLimitKeeper } from './io-limit-keeper.js';
import { AgentMetrics } from './metrics.js';
import { computeReading } from './reading.js';
import { ProcReader, type RawSample } from './sampler.js';

export interface Publisher {
  /** What the node's SandboxHealth says of IO limits, as the write was answered; 'missing' when there is none yet. */
  publish(reading: IoReadingStatus): Promise<IoLimitsAnswer | 'missing'>;
  /** Writes the agent's report of the IO limits it applied. */
  publishLimits(report: IoLimitReport): Promise<IoLimitsAnswer | 'missing'>;
}

export interface AgentOptions {
  nodeName: string;
  procRoot: string;
  intervalMs: number;
  /**
   * Publish at least this often even when nothing moved, so readers can tell fresh from stale; keep it below the
   * policies' staleAfterSeconds.
   */
  heartbeatMs: number;
  /** Publish at least this often while the node reads above idle (any signal out of its lowest band). */
  pressuredHeartbeatMs?: number;
  publisher?: Publisher;
  logger: Logger;
  clockTicksPerSecond?: number;
  /** Loop devices count as disks (--include-loop-devices). */
  includeLoopDevices?: boolean;
  /** Who does the IO, from the cgroup tree (docs/adr/0018-io-attribution.md); undefined: not attributed. */
  attribution?: Omit<AttributorOptions, 'procRoot' | 'intervalMs' | 'now'>;
  /** The samples' monotonic clock in milliseconds (tests give one that moves a second a tick). */
  sampleClock?: () => number;
  /** Brings the pods' cgroups to the IO limits the operator wants, on each answer to a publish (limitIo). */
  ioLimits?: IoLimitKeeper;
}

/**
 * Samples /proc every interval; publishes a reading when it moved into another band (isMaterialChange: with
 * hysteresis, so an idle node's wobble writes nothing) or the heartbeat is due. Readers call a reading older than
 * staleAfterSeconds (90 s by default) unknown: the heartbeat (60 s by default) must stay below it.
 */
export class NodeAgent {
  readonly metrics: AgentMetrics;
  private readonly proc: ProcReader;
  private readonly attributor: Attributor | undefined;
  private previous: RawSample | undefined;
  private published: IoReadingStatus | undefined;
  private publishedAt = -Infinity;
  /** No publish before this (performance.now()): after a 404 or an error, not again on the next tick. */
  private retryAt = -Infinity;
  private failures = 0;
  private reportedProblems = '';
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  latest: IoReadingStatus | undefined;

  constructor(private readonly options: AgentOptions) {
    this.metrics = new AgentMetrics(options.publisher !== undefined);
    this.proc = new ProcReader(options.procRoot, options.sampleClock);
    this.attributor =
      options.attribution &&
      new Attributor({
        ...options.attribution,
        procRoot: options.procRoot,
        intervalMs: options.intervalMs,
        ...(options.sampleClock ? { now: options.sampleClock } : {}),
      });
    // Staleness counts from the start until the first publish; an agent that publishes nothing has no such series.
    if (options.publisher) this.metrics.lastPublish.set(Date.now() / 1000);
  }

  /** One sample; returns the reading it produced. */
  async tick(): Promise<IoReadingStatus> {
    const started = performance.now();
    const sample = this.proc.sample();
    const reading = computeReading(this.previous, sample, new Date(), this.options.clockTicksPerSecond, {
      loop: this.options.includeLoopDevices === true,
    });
    const attributed = this.attributor?.attribute(sample, reading, this.published?.attribution);
    this.metrics.sampleSeconds.observe((performance.now() - started) / 1000);
    if (attributed?.attribution) reading.attribution = attributed.attribution;
    this.report([...sample.problems, ...(attributed?.problems ?? [])]);
    this.previous = sample;
    this.latest = reading;
    this.metrics.record(reading);
    const { logger } = this.options;
    const now = performance.now();
    // Above idle, the published value must stay close to the truth: a short heartbeat. Idle, the long one.
    // So are limits wanted or in force: the operator's wish to lift one is read from the answer to a publish.
    const heartbeatMs =
      isQuiet(this.published) && isQuiet(reading) && !this.options.ioLimits?.active
        ? this.options.heartbeatMs
        : Math.min(this.options.heartbeatMs, this.options.pressuredHeartbeatMs ?? 10_000);
    const heartbeatDue = now - this.publishedAt >= heartbeatMs;
    const material = isMaterialChange(this.published, reading);
    if (this.options.publisher && now >= this.retryAt && (heartbeatDue || material)) {
      try {
        // Tells readers how long this agent may go without writing: a reading younger than that is current.
        const result = await this.options.publisher.publish({
          ...reading,
          heartbeatSeconds: Math.max(1, Math.round(this.options.heartbeatMs / 1000)),
        });
        this.metrics.publishes.inc({ result: result === 'missing' ? result : 'published' });
        if (result !== 'missing') {
          this.metrics.lastPublish.set(Date.now() / 1000);
          this.published = reading;
          this.publishedAt = now;
          this.failures = 0;
          await this.keepLimits(this.options.publisher, result);
        } else {
          // Nothing selects the node yet (or the operator is not running): ask again at the next heartbeat,
          // not every second; an agent runs on every node, selected or not.
          if (heartbeatDue)
            logger.info(
              'Found no SandboxHealth for this node yet: no policy selects it, or the operator is not running',
              { node: this.options.nodeName },
            );
          this.retryAt = now + this.options.heartbeatMs;
          // No SandboxHealth, no limit wanted: what this agent applied is lifted (there is no report to write).
          await this.keepLimits(this.options.publisher, { wanted: [] }, { report: false });
        }
      } catch (err) {
        this.metrics.publishes.inc({ result: 'error' });
        this.failures++;
        this.retryAt = now + Math.min(this.options.heartbeatMs, 1000 * 2 ** (this.failures - 1));
        logger.warn('Failed to publish IO reading', {
          node: this.options.nodeName,
          error: (err as Error).message,
        });
      }
    }
    return reading;
  }

  /**
   * The IO limits brought to what the answer wants, each outcome counted and logged, and the report written when it
   * changed. A failed write of the report is written again next round: the keeper's memory holds what was applied.
   */
  private async keepLimits(
    publisher: Publisher,
    answer: IoLimitsAnswer,
    { report: write } = { report: true },
  ): Promise<void> {
    const keeper = this.options.ioLimits;
    if (!keeper || (!write && !keeper.active)) return;
    const { logger, nodeName } = this.options;
    let step = keeper.round(answer);
    if (step.ahead) {
      // What is about to be written is reported first: with no SandboxHealth, or the write refused, nothing is.
      if (!write) return;
      try {
        if ((await publisher.publishLimits(step.ahead)) === 'missing') return;
      } catch (err) {
        logger.warn('Failed to report the IO limits about to be set: none set this round', {
          node: nodeName,
          error: (err as Error).message,
        });
        return;
      }
      keeper.written(step.ahead);
      step = keeper.carryOut();
    }
    const { report, outcomes } = step.ahead ? { report: undefined, outcomes: [] } : step;
    for (const outcome of outcomes) {
      // Refused again every round while wanted: counted and logged once, when the report first says it.
      if (outcome.result === 'Refused' && !report) continue;
      this.metrics.ioLimits.inc({ result: outcome.result });
      const quiet = outcome.result === 'Set' || outcome.result === 'Stepped' || outcome.result === 'Lifted';
      logger[quiet ? 'info' : 'warn'](`IO limit ${outcome.result}`, { node: nodeName, ...outcome });
    }
    if (!report || !write) return;
    try {
      if ((await publisher.publishLimits(report)) !== 'missing') keeper.written(report);
    } catch (err) {
      logger.warn('Failed to report IO limits', { node: nodeName, error: (err as Error).message });
    }
  }

  /** Counts a sample with problems, and logs them when they are not the ones logged last. */
  private report(problems: string[]): void {
    if (problems.length === 0) return;
    this.metrics.readProblems.inc();
    const text = problems.join('; ');
    if (text !== this.reportedProblems)
      this.options.logger.warn('Read /proc or the cgroup tree partially: the rest is unknown', { problems });
    this.reportedProblems = text;
  }

  start(): void {
    const loop = async () => {
      await this.tick().catch((err: unknown) => {
        this.options.logger.error('Failed to sample', { error: (err as Error).message });
      });
      this.timer = setTimeout(() => {
        this.running = loop();
      }, this.options.intervalMs);
    };
    this.running = loop();
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
    await this.running;
    clearTimeout(this.timer);
  }
}
