// A crafted /proc for the node agent (--proc-root): the recorded idle and stress-ng fixtures, switchable at run
// time, so a kwok node can be put under IO pressure and taken out of it on cue.
import { cp, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from './manifests.js';

const FIXTURES = join(REPO_ROOT, 'test', 'fixtures', 'proc');

export class ProcRoot {
  dir = '';

  /** A copy of the idle fixtures: PSI some avg10 0.72 %. */
  async create(): Promise<string> {
    this.dir = await mkdtemp(join(tmpdir(), 'proc-'));
    await cp(join(FIXTURES, 'idle'), this.dir, { recursive: true });
    await mkdir(join(this.dir, 'pressure'));
    await this.setPressure('idle');
    return this.dir;
  }

  /** `load` is the PSI recorded under stress-ng (some avg10 38.24 %); `idle` the one recorded at rest. */
  async setPressure(which: 'idle' | 'load'): Promise<void> {
    const text = await readFile(join(FIXTURES, which, 'pressure-io'), 'utf8');
    // Written aside and renamed into place: the agent never reads a file half written (its parser refuses one).
    const file = join(this.dir, 'pressure', 'io');
    await writeFile(`${file}.next`, text);
    await rename(`${file}.next`, file);
  }

  async remove(): Promise<void> {
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

/**
 * ioPressure for a policy over nodes whose agent reads a ProcRoot: pressure 2 s after `load`, recovered 5 s after
 * `idle`. The crafted /proc's PSI is the only reading that moves (38 % under load, 0.7 % idle), so only it counts.
 */
export const FAST_IO = {
  sustainSeconds: 2,
  recoverySeconds: 5,
  staleAfterSeconds: 10,
  thresholds: {
    psiSomeAvg10Percent: 30,
    psiFullAvg10Percent: 100,
    diskBusyPercent: 100,
    blockedProcesses: 10_000,
  },
};
