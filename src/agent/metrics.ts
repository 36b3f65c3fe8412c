// The agent's own metrics in the Prometheus text format, without prom-client. prom-client adds about 11 MiB of
// RSS to a process, and its default metrics (collectDefaultMetrics) were most of the agent's CPU: on every scrape
// they read /proc/self and the event loop histograms (docs/adr/0011-lean-agent.md). The agent exports a fixed,
// small set of series; this writes exactly those.
import type { IoReadingStatus } from '../api/v1alpha1/index.js';

type Labels = Readonly<Record<string, string>>;

const escapeLabel = (value: string) =>
  value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
const escapeHelp = (text: string) => text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const labelText = (labels: Labels) => {
  const pairs = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  return pairs.length ? `{${pairs.join(',')}}` : '';
};
/** Go's and prom-client's spelling of non-finite values. */
const valueText = (n: number) =>
  Number.isNaN(n) ? 'NaN' : n === Infinity ? '+Inf' : n === -Infinity ? '-Inf' : String(n);

abstract class Family {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'gauge' | 'counter' | 'histogram',
  ) {}
  protected abstract samples(): string[];
  text(): string {
    const samples = this.samples();
    // prom-client writes HELP and TYPE for a family without series too, and so do we: a scraper learns the name.
    return [
      `# HELP ${this.name} ${escapeHelp(this.help)}`,
      `# TYPE ${this.name} ${this.type}`,
      ...samples,
    ].join('\n');
  }
}

/** Series keyed by their label text, so one label set is one series. */
class Series extends Family {
  protected readonly values = new Map<string, number>();
  protected samples(): string[] {
    return [...this.values].map(([labels, value]) => `${this.name}${labels} ${valueText(value)}`);
  }
  /** Current value of the series with these labels; undefined when it has none. */
  get(labels: Labels = {}): number | undefined {
    return this.values.get(labelText(labels));
  }
  /** How many series the family has. */
  get size(): number {
    return this.values.size;
  }
  reset(): void {
    this.values.clear();
  }
}

export class Gauge extends Series {
  constructor(name: string, help: string) {
    super(name, help, 'gauge');
  }
  set(value: number, labels: Labels = {}): void {
    this.values.set(labelText(labels), value);
  }
}

export class Counter extends Series {
  constructor(name: string, help: string) {
    super(name, help, 'counter');
  }
  inc(labels: Labels = {}, by = 1): void {
    const key = labelText(labels);
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }
}

export class Histogram extends Family {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;
  constructor(
    name: string,
    help: string,
    private readonly buckets: readonly number[],
  ) {
    super(name, help, 'histogram');
    this.counts = buckets.map(() => 0);
  }
  observe(value: number): void {
    this.sum += value;
    this.count++;
    for (const [i, le] of this.buckets.entries()) if (value <= le) this.counts[i] = (this.counts[i] ?? 0) + 1;
  }
  get observations(): number {
    return this.count;
  }
  protected samples(): string[] {
    return [
      ...this.buckets.map((le, i) => `${this.name}_bucket{le="${le}"} ${this.counts[i] ?? 0}`),
      `${this.name}_bucket{le="+Inf"} ${this.count}`,
      `${this.name}_sum ${this.sum}`,
      `${this.name}_count ${this.count}`,
    ];
  }
}

/** A family whose one value is read when scraped. */
class Sampled extends Family {
  constructor(
    name: string,
    help: string,
    type: 'gauge' | 'counter',
    private readonly read: () => number,
  ) {
    super(name, help, type);
  }
  protected samples(): string[] {
    return [`${this.name} ${valueText(this.read())}`];
  }
}

const PREFIX = 'sandbox_remediator_agent_';

export class AgentMetrics {
  /** The exposition format version these lines follow, as a Content-Type. */
  readonly contentType = 'text/plain; version=0.0.4; charset=utf-8';
  readonly psiSome = new Gauge(
    `${PREFIX}io_pressure_some_avg10_percent`,
    'PSI io some avg10 (absent when unknown).',
  );
  readonly psiFull = new Gauge(
    `${PREFIX}io_pressure_full_avg10_percent`,
    'PSI io full avg10 (absent when unknown).',
  );
  readonly diskBusy = new Gauge(
    `${PREFIX}disk_busy_percent`,
    'Share of the last interval each whole disk had IO in flight.',
  );
  readonly blocked = new Gauge(`${PREFIX}procs_blocked`, 'Tasks blocked on IO (procs_blocked).');
  readonly dState = new Gauge(
    `${PREFIX}dstate_tasks`,
    'Tasks in D state, by whether they belong to the container runtime.',
  );
  readonly kworker = new Gauge(
    `${PREFIX}kworker_cpu_percent`,
    'CPU used by kworker threads over the last interval (100 = one core).',
  );
  readonly publishes = new Counter(
    `${PREFIX}publishes_total`,
    'Readings written to SandboxHealth, by result.',
  );
  readonly lastPublish = new Gauge(
    `${PREFIX}last_publish_timestamp_seconds`,
    'Unix time of the last reading written to SandboxHealth; before the first, when the agent started (so an agent that never manages to publish shows as stale too).',
  );
  readonly readProblems = new Counter(
    `${PREFIX}read_problems_total`,
    'Samples in which a /proc part or a cgroup file could not be read or parsed.',
  );
  readonly ioLimits = new Counter(
    `${PREFIX}io_limits_total`,
    'IO limits this agent set, stepped, lifted, left as found, refused (no --allow-io-limits) or failed, by result (spec.remediation.limitIo).',
  );
  readonly sampleSeconds = new Histogram(
    `${PREFIX}sample_duration_seconds`,
    'Time one sample of /proc (and of the cgroup tree, when attributing) took.',
    [0.001, 0.005, 0.01, 0.05, 0.1, 0.5],
  );
  private readonly families: Family[];

  /** `publishing`: whether this agent writes readings (without, it has no last-publish series at all). */
  constructor(publishing: boolean) {
    // The agent's own cost, as node_exporter and prom-client name it: the two figures its overhead is judged by.
    const own = [
      new Sampled(
        'process_cpu_seconds_total',
        'Total user and system CPU time spent in seconds.',
        'counter',
        () => {
          const { user, system } = process.cpuUsage();
          return (user + system) / 1e6;
        },
      ),
      new Sampled('process_resident_memory_bytes', 'Resident memory size in bytes.', 'gauge', () =>
        process.memoryUsage.rss(),
      ),
    ];
    // A counter starts at 0, so that rate() and increase() see its first increment.
    this.readProblems.inc({}, 0);
    this.families = [
      this.psiSome,
      this.psiFull,
      this.diskBusy,
      this.blocked,
      this.dState,
      this.kworker,
      this.publishes,
      ...(publishing ? [this.lastPublish] : []),
      this.readProblems,
      this.ioLimits,
      this.sampleSeconds,
      ...own,
    ];
  }

  /** The exposition: every family, HELP and TYPE first. */
  metrics(): Promise<string> {
    return Promise.resolve(`${this.families.map((f) => f.text()).join('\n')}\n`);
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
      this.diskBusy.set(device.busyPercent, { device: device.name });
    this.dState.reset();
    if (reading.dStateTasks) {
      const runtime = reading.dStateTasks.filter((t) => t.runtime).length;
      this.dState.set(runtime, { runtime: 'true' });
      this.dState.set(reading.dStateTasks.length - runtime, { runtime: 'false' });
    }
  }
}
