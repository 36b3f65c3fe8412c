// A process the side-by-side bench starts and measures the same way whatever it is (the descheduler's Go binary,
// the operator or an agent as compiled JavaScript): its peak RSS from the kernel, and the tail of its log.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

export class MeasuredProcess {
  private readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private readonly exited: Promise<void>;
  private peakKiB = 0;

  constructor(
    readonly name: string,
    command: string,
    args: string[],
  ) {
    // klog (the descheduler) and winston (ours) both log to stderr; stdout stays quiet.
    this.child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', () => {
        resolve();
      });
    });
    let buffer = '';
    this.child.stderr?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        this.lines.push(buffer.slice(0, newline));
        buffer = buffer.slice(newline + 1);
        if (this.lines.length > 2000) this.lines.splice(0, 1000);
      }
    });
  }

  isRunning(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Waits for a log line containing `text`; fails when the process exits first or after `timeoutMs`. */
  async waitForLine(text: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.lines.some((l) => l.includes(text))) {
      if (!this.isRunning()) throw new Error(`${this.name} exited before logging "${text}":\n${this.tail()}`);
      if (Date.now() > deadline) throw new Error(`${this.name} did not log "${text}":\n${this.tail()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /**
   * The kernel's high-water mark of resident memory (VmHWM) for the whole life of the process, so no sampling
   * interval can miss a peak. Read before the process stops; the last value read is kept.
   */
  peakRssKiB(): number {
    if (this.child.pid !== undefined && this.isRunning()) {
      const status = readFileSync(`/proc/${this.child.pid}/status`, 'utf8');
      this.peakKiB = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? this.peakKiB);
    }
    return this.peakKiB;
  }

  tail(lines = 30): string {
    return this.lines.slice(-lines).join('\n');
  }

  /** SIGTERM, SIGKILL after 20 s; the peak RSS is read first. */
  async stop(): Promise<void> {
    if (!this.isRunning()) return;
    this.peakRssKiB();
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 20_000);
    await this.exited;
    clearTimeout(timer);
  }
}
