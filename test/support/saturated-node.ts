// A node in the incident: new pods there stay in ContainerCreating, and a real agent process reads a crafted
// /proc whose IO pressure the test sets (idle or load).
import { AgentProcess } from './agent-process.js';
import { hack, type Cleanup } from './cluster.js';
import { ProcRoot } from './proc-root.js';
import { startIncident } from './workloads.js';

/** A saturated node: the incident holds new pods there in ContainerCreating, the agent reads load-level PSI. */
export class SaturatedNode {
  private readonly agent = new AgentProcess();
  private readonly proc = new ProcRoot();
  constructor(
    readonly name: string,
    private readonly cleanup: Cleanup,
  ) {}
  /** incidentArgs go to `hack/cluster/incident start` (--message, --no-events). */
  async start(incidentArgs: string[] = []): Promise<void> {
    const dir = await this.proc.create();
    this.cleanup.add(() => this.proc.remove());
    this.agent.start(this.name, [`--proc-root=${dir}`, '--interval-seconds=1', '--heartbeat-seconds=3']);
    this.cleanup.add(() => this.agent.stop());
    // Both started before it returns (hack incident start waits for its daemon): their start-up is CPU a test or a
    // bench's incident would otherwise share with the operator it measures. Both settled before failing: an incident
    // still starting must register its stop in the cleanup first.
    const settled = await Promise.allSettled([
      this.agent.started(),
      startIncident(this.cleanup, this.name, incidentArgs),
    ]);
    for (const outcome of settled) if (outcome.status === 'rejected') throw outcome.reason;
  }
  pressure(which: 'load' | 'idle'): Promise<void> {
    return this.proc.setPressure(which);
  }
  async end(): Promise<void> {
    const stopped = await hack('incident', ['stop', '--node', this.name]);
    if (stopped.code !== 0) throw new Error(`incident stop on ${this.name} failed: ${stopped.stderr}`);
    await this.proc.setPressure('idle');
  }
}
