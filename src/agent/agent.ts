import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import type { Logger } from '../observability/logger.js';
import { isMaterialChange, isQuiet } from '../signals/material-change.js';
import { computeReading } from './reading.js';
import { takeSample, type RawSample } from './sampler.js';

export interface Publisher {
  publish(reading: IoReadingStatus): Promise<'published' | 'missing'>;
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
}

export class AgentMetrics {
  readonly registry = new Registry();
  private readonly g = (name: string, help: string, labelNames: string[] = []) =>
    new Gauge({ name: `sandbox_remediator_agent_${name}`, help, labelNames, registers: [this.registry] });
  readonly psiSome = this.g('io_pressure_some_avg10_percent', 'PSI io some avg10 (absent when unknown).');
  readonly psiFull = this.g('io_pressure_full_avg10_percent', 'PSI io full avg10 (absent when unknown).');
  readonly diskBusy = this.g(
    'disk_busy_percent',
    'Share of the last interval each whole disk had IO in flight.',
    ['device'],
  );
  readonly blocked = this.g('procs_blocked', 'Tasks blocked on IO (procs_blocked).');
  readonly dState = this.g(
    'dstate_tasks',
    'Tasks in D state, by whether they belong to the container runtime.',
    ['runtime'],
  );
  readonly kworker = this.g(
    'kworker_cpu_percent',
    'CPU used by kworker threads over the last interval (100 = one core).',
  );
  readonly publishes = new Counter({
    name: 'sandbox_remediator_agent_publishes_total',
    help: 'Readings written to SandboxHealth, by result.',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly lastPublish = this.g(
    'last_publish_timestamp_seconds',
    'Unix time of the last reading written to SandboxHealth; before the first, when the agent started (so an agent that never manages to publish shows as stale too).',
  );
  readonly readProblems = new Counter({
    name: 'sandbox_remediator_agent_read_problems_total',
    help: 'Samples in which a /proc part could not be read or parsed.',
    registers: [this.registry],
  });
  readonly sampleSeconds = new Histogram({
    name: 'sandbox_remediator_agent_sample_duration_seconds',
    help: 'Time one /proc sample took.',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5],
    registers: [this.registry],
  });
  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  record(reading: IoReadingStatus): void {
    const set = (gauge: Gauge, value: number | undefined) => {
      if (value === undefined) gauge.reset();
      else gauge.set(value);
    };
    set(this.psiSome, reading.psiSomeAvg10Percent);
    set(this.psiFull, reading.psiFullAvg10Percent);
    set(this.blocked, reading.blockedProcesses);
    set(this.kworker, reading.kworkerCpuPercent);
    this.diskBusy.reset();
    for (const device of reading.devices ?? [])
      this.diskBusy.set({ device: device.name }, device.busyPercent);
    this.dState.reset();
    if (reading.dStateTasks) {
      const runtime = reading.dStateTasks.filter((t) => t.runtime).length;
      this.dState.set({ runtime: 'true' }, runtime);
      this.dState.set({ runtime: 'false' }, reading.dStateTasks.length - runtime);
    }
  }
}

/**
 * Samples /proc every interval; publishes a reading when it moved into another band (isMaterialChange: with
 * hysteresis, so an idle node's wobble writes nothing) or the heartbeat is due. Readers call a reading older than
 * staleAfterSeconds (90 s by default) unknown: the heartbeat (60 s by default) must stay below it.
 */
export class NodeAgent {
  readonly metrics = new AgentMetrics();
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
    // Staleness counts from the start until the first publish; an agent that publishes nothing has no such series.
    if (options.publisher) this.metrics.lastPublish.set(Date.now() / 1000);
    else this.metrics.registry.removeSingleMetric('sandbox_remediator_agent_last_publish_timestamp_seconds');
  }

  /** One sample; returns the reading it produced. */
  async tick(): Promise<IoReadingStatus> {
    const { logger } = this.options;
    const end = this.metrics.sampleSeconds.startTimer();
    const sample = await takeSample(this.options.procRoot);
    end();
    if (sample.problems.length > 0) {
      this.metrics.readProblems.inc();
      const text = sample.problems.join('; ');
      if (text !== this.reportedProblems)
        logger.warn('Read /proc partially: the rest is unknown', { problems: sample.problems });
      this.reportedProblems = text;
    }
    const reading = computeReading(this.previous, sample, new Date(), this.options.clockTicksPerSecond);
    this.previous = sample;
    this.latest = reading;
    this.metrics.record(reading);
    const now = performance.now();
    // Above idle, the published value must stay close to the truth: a short heartbeat. Idle, the long one.
    const heartbeatMs =
      isQuiet(this.published) && isQuiet(reading)
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
        this.metrics.publishes.inc({ result });
        if (result === 'published') {
          this.metrics.lastPublish.set(Date.now() / 1000);
          this.published = reading;
          this.publishedAt = now;
          this.failures = 0;
        } else {
          // Nothing selects the node yet (or the operator is not running): ask again at the next heartbeat,
          // not every second; an agent runs on every node, selected or not.
          if (heartbeatDue)
            logger.info(
              'Found no SandboxHealth for this node yet: no policy selects it, or the operator is not running',
              { node: this.options.nodeName },
            );
          this.retryAt = now + this.options.heartbeatMs;
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
