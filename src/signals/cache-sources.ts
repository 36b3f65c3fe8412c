import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import type { ClusterCache } from '../ports/cluster.js';
import type { IoSource, SourcedReading } from './types.js';

/** Readings the node agent published into SandboxHealth status.ioReading. */
export class AgentSource implements IoSource {
  readonly kind = 'agent';
  constructor(private readonly cache: Pick<ClusterCache, 'health'>) {}
  refresh(): Promise<void> {
    return Promise.resolve();
  }
  read(nodeName: string): SourcedReading | undefined {
    const health = this.cache.health(nodeName);
    const reading = health?.status?.ioReading;
    if (!reading) return undefined;
    return health.readingWrittenTime ? { ...reading, writtenTime: health.readingWrittenTime } : reading;
  }
}

/** A node condition someone else sets (node-problem-detector style): True means IO pressure. */
export class NodeConditionSource implements IoSource {
  readonly kind = 'nodeCondition';
  constructor(
    private readonly cache: Pick<ClusterCache, 'node'>,
    private readonly conditionType: string,
    private readonly now: () => Date = () => new Date(),
  ) {}
  refresh(): Promise<void> {
    return Promise.resolve();
  }
  read(nodeName: string): IoReadingStatus | undefined {
    const condition = this.cache.node(nodeName)?.conditions.find((c) => c.type === this.conditionType);
    if (!condition || (condition.status !== 'True' && condition.status !== 'False')) return undefined;
    // The condition is current as long as the node object is: it is read from the live cache.
    return {
      source: 'nodeCondition',
      observedTime: this.now().toISOString(),
      conditionTrue: condition.status === 'True',
    };
  }
}
