// `make demo` end to end, without a terminal: the demo's own program on the real cluster, with real disk load done
// inside a pod's cgroup on this machine's real cgroup tree, on nodes and a namespace of its own. Each step must have
// happened, in order, by the timeline it prints, which it draws from the cluster's Events and status; and the node
// and the cgroup tree must be back as they were.
import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLUSTER_DIR, kubectl, resolveKubectl } from '../support/cluster.js';
import { REPO_ROOT } from '../support/manifests.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { ioHierarchy, removeLeftovers, type Culprit } from '../../hack/demo/neighbour.js';
import type { TimelineEntry } from '../../hack/demo/timeline.js';
import type { NodeDiagnosis } from '../../src/diagnose/schema.js';

/** A base port with the two after it free too (the operator's metrics and probes, the agent's metrics). */
async function freePortRun(): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once('error', () => {
        resolve(false);
      });
      server.listen(port, '127.0.0.1', () =>
        server.close(() => {
          resolve(true);
        }),
      );
    });
  for (let attempt = 0; attempt < 50; attempt++) {
    // Below the ephemeral range (32768-60999 here): an outgoing connection cannot take it between this check and the
    // operator's bind, as one took 35336 once.
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    if ((await free(base)) && (await free(base + 1)) && (await free(base + 2))) return base;
  }
  throw new Error('no three consecutive free ports');
}

const NEIGHBOUR_STATE = join(CLUSTER_DIR, 'neighbour-cgroups.json');

describe('make demo, end to end without a terminal', function () {
  let dir = '';
  let demo: ChildProcess | undefined;
  let id = '';
  after(async function () {
    this.timeout(60_000);
    // A demo cut short (a timeout here) must not leave its operator acting beside the next test's: stop its process
    // group, the operator and agent it recorded, and what it created.
    if (demo?.pid !== undefined && demo.exitCode === null) {
      const exited = new Promise((resolve) => demo?.once('exit', resolve));
      process.kill(-demo.pid, 'SIGTERM');
      // Its SIGTERM handler stops the noisy neighbour and removes its cgroup; what it could not, goes here.
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 20_000))]);
      for (const problem of removeLeftovers(NEIGHBOUR_STATE)) console.error(`left behind: ${problem}`);
      for (const name of ['operator', 'agent']) {
        const file = join(CLUSTER_DIR, 'pids', `${name}.pid`);
        const pid = Number(await readFile(file, 'utf8').catch(() => ''));
        const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
        if (pid > 0 && cmdline.includes('src/main.ts')) process.kill(pid, 'SIGTERM');
      }
      await kubectl(['delete', 'namespace', `demo-${id}`, '--ignore-not-found', '--wait=false']);
      await kubectl(['delete', 'sandboxpolicy', `demo-${id}`, '--ignore-not-found']);
      for (let i = 0; i < 6; i++) await kubectl(['delete', 'node', `demo-${id}-${i}`, '--ignore-not-found']);
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('detects, proves, names the culprit, cordons, evicts, pauses a rollout, moves the culprit, recovers and undoes, in that order, and exits 0', async function () {
    this.timeout(600_000);
    const hadSlices = existsSync(`${ioHierarchy()?.dir}/kubepods.slice`);
    dir = await mkdtemp(join(tmpdir(), 'demo-'));
    id = Math.random().toString(36).slice(2, 7);
    const timelineFile = join(dir, 'timeline.json');
    const diagnosisFile = join(dir, 'diagnosis.json');
    const child = spawn(join(REPO_ROOT, 'hack', 'demo.sh'), ['--cleanup'], {
      detached: true, // its own process group, stopped whole in after()
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        KUBECTL: resolveKubectl(),
        THRESHOLD: '10',
        LOAD_SECONDS: '240',
        DEMO_NODE_PREFIX: `demo-${id}-`,
        DEMO_NAMESPACE: `demo-${id}`,
        DEMO_POLICY: `demo-${id}`,
        DEMO_PORT_BASE: String(await freePortRun()),
        DEMO_TIMELINE_JSON: timelineFile,
        DEMO_DIAGNOSE_JSON: diagnosisFile,
        NODE_V8_COVERAGE: '',
      },
    });
    demo = child;
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code, `the demo's exit status; its output:\n${output.slice(-6000)}`).to.equal(0);

    // Every step announced, in order, and no escape codes without a terminal.
    const steps = [...output.matchAll(/^== (\d+)\/10 /gm)].map((m) => Number(m[1]));
    expect(steps).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(output).to.not.include('\x1b[');
    expect(output).to.include('kubectl get sandboxhealth');
    expect(output).to.include('kubectl get sandboxpolicies');

    const { timeline, culprit } = JSON.parse(await readFile(timelineFile, 'utf8')) as {
      timeline: TimelineEntry[];
      culprit?: Culprit;
    };
    const sick = `node/demo-${id}-1`;
    // When each first happened, in whole seconds (Events carry no more): steps taken in one pass share a second.
    const at = (reason: string, object?: string, last = false) => {
      const matching = timeline.filter(
        (e) => e.reason === reason && (object === undefined || e.object === object),
      );
      expect(
        matching,
        `${reason}${object ? ` on ${object}` : ''} in the timeline:\n${JSON.stringify(timeline, null, 1)}`,
      ).to.not.be.empty;
      return Math.floor(new Date((last ? matching.at(-1) : matching[0])!.time).getTime() / 1000);
    };
    const failure = at('FailedCreatePodSandBox');
    at('IoOverThresholds'); // the evidence the demo read from status
    // Since when the readings had been over, as the operator's IoPressureHigh Event says.
    const first = timeline.find((e) => e.reason === 'IoPressureHigh' && e.object === sick);
    const overSince = /since (\d{4}-\d\d-\d\dT[\d:.]+Z)/.exec(first?.message ?? '')?.[1];
    expect(overSince, `the IoPressureHigh Event says since when: ${first?.message}`).to.be.a('string');
    const evidence = Math.floor(Date.parse(overSince!) / 1000);
    const pressure = at('IoPressureHigh', sick);
    const degraded = at('SandboxCreationDegraded', sick);
    const cordon = at('Cordoned', sick);
    const evicted = at('EvictedStuckPod');
    const paused = at('RolloutPaused');
    const recovered = at('IoPressureRecovered', sick);
    const uncordon = at('Uncordoned', sick);
    // Never acted on before the evidence held sustainSeconds (5) and a pod had waited the threshold (10 s). (The
    // Events of one pass are written in no set order: an action's can precede IoPressureHigh's by a second.)
    const SUSTAIN = 5;
    const THRESHOLD = 10;
    expect(pressure, 'IoPressureHigh sustainSeconds after the readings went over').to.be.at.least(
      evidence + SUSTAIN,
    );
    // No pod is stuck before the incident starts (the threshold counts from a pod's scheduling, not its Events).
    const incident = at('IncidentStarted');
    expect(failure, "kubelet's failures once the incident started").to.be.at.least(incident);
    expect(degraded, 'detected once a pod waited the threshold').to.be.at.least(incident + THRESHOLD);
    for (const [what, time] of [
      ['the cordon', cordon],
      ['the first eviction', evicted],
      ['the first rollout pause', paused],
    ] as const) {
      expect(time, `${what} after the pressure was proven`).to.be.at.least(evidence + SUSTAIN);
      if (what !== 'the first rollout pause')
        expect(time, `${what} after a pod waited the threshold`).to.be.at.least(incident + THRESHOLD);
    }
    expect(cordon, 'detected, then cordoned').to.be.at.least(degraded);
    expect(evicted, 'cordoned, then evicted').to.be.at.least(cordon);
    expect(recovered, 'recovery after the remediation').to.be.above(evicted);
    expect(uncordon, 'undone only after recovery').to.be.at.least(recovered);
    // Every rollout paused was resumed (queued ones may go on under pressure, when their turn comes).
    const rollouts = new Set(timeline.filter((e) => e.reason === 'RolloutPaused').map((e) => e.object));
    for (const object of rollouts) {
      const changes = timeline.filter(
        (e) => e.object === object && /^Rollout(Paused|Resumed)$/.test(e.reason),
      );
      expect(changes.at(-1)?.reason, `${object}: ${changes.map((e) => e.reason).join(', ')}`).to.equal(
        'RolloutResumed',
      );
    }
    expect(output).to.match(/^\+\d\d:\d\d {2}operator {2}node\/demo-\w+-1 +Cordoned/m);

    // The noisy neighbour: one of the shop's pods on the sick node, its load done in its cgroup on the real tree.
    expect(culprit, 'the noisy neighbour in the timeline file').to.not.equal(undefined);
    const { namespace, name, cgroup, replacement } = culprit!;
    expect(namespace).to.equal(`demo-${id}`);
    expect(name).to.match(/^shop-/);
    const slices = `${ioHierarchy()?.dir}/kubepods.slice`;
    expect(cgroup).to.equal(
      `${slices}/kubepods-besteffort.slice/kubepods-besteffort-pod${culprit!.uid.replace(/-/g, '_')}.slice`,
    );
    const who = `${namespace}/${name}`;
    // Named with its share, as the agent measured it on the real tree: the operator's IoCulpritFound Event.
    const found = timeline.find((e) => e.reason === 'IoCulpritFound' && e.object === sick);
    const share = Number(new RegExp(`^${who} does (\\d+)%`).exec(found?.message ?? '')?.[1]);
    expect(share, `the culprit named with its share: ${found?.message}`).to.be.at.least(25);
    expect(culprit!.sharePercent, 'its share in status.ioCause').to.be.at.least(25);
    expect(output).to.include('kubectl get sbh');
    expect(output).to.match(/ TOP IO\b/);
    expect(output).to.match(new RegExp(` ${who} \\d+%`)); // the Top IO column
    // Moved after the cordon and the stuck pods' evictions; its load stopped with it; its replacement Running on
    // another node; the node recovered after that.
    const migrated = at('MigratedIoHeavyPod', `pod/${who}`);
    expect(migrated, 'the culprit moved once named').to.be.at.least(at('IoCulpritFound', sick));
    expect(migrated, 'cordoned, then the culprit moved').to.be.at.least(cordon);
    expect(migrated, 'the stuck pods first').to.be.at.least(at('EvictedStuckPod', undefined, true));
    expect(at('LoadStopped', `pod/${who}`), 'its load ends with its pod').to.be.at.least(migrated);
    expect(replacement?.node, 'its replacement on another node').to.match(new RegExp(`^demo-${id}-[02-5]$`));
    expect(at('ReplacementRunning', `pod/${namespace}/${replacement?.name}`)).to.be.at.least(migrated);
    expect(recovered, 'the node recovers once the culprit is gone').to.be.at.least(migrated);
    // The cgroup tree as it was: the pod's cgroup gone, and the levels above it only if they were there before.
    expect(existsSync(cgroup), `${cgroup} removed`).to.equal(false);
    expect(existsSync(slices), `${slices} as before the demo`).to.equal(hadSlices);
    expect(existsSync(NEIGHBOUR_STATE), 'nothing left for a next run to undo').to.equal(false);

    // `kubectl sandbox diagnose NODE -o json`, taken while one stuck pod waited for the eviction rate: valid by the
    // published schema, naming the stuck pod, its cause, the evidence and the actions taken.
    const diagnosis = JSON.parse(await readFile(diagnosisFile, 'utf8')) as NodeDiagnosis;
    const schema = JSON.parse(
      await readFile(join(REPO_ROOT, 'schemas', 'diagnosis.schema.json'), 'utf8'),
    ) as object;
    const validate = new Ajv2020({ allErrors: true, strict: false, validateFormats: false }).compile(schema);
    expect(validate(diagnosis), JSON.stringify(validate.errors)).to.equal(true);
    expect(diagnosis.node).to.equal(`demo-${id}-1`);
    expect(diagnosis.stuckPods.listed.map((p) => p.cause)).to.include('NameReserved');
    expect(diagnosis.stuckPods.listed.every((p) => p.namespace === `demo-${id}` && p.reservedFor)).to.equal(
      true,
    );
    expect(diagnosis.io.reading).to.include({ source: 'agent', stale: false });
    // The evidence behind the cordon (the load may ebb meanwhile on a busy machine: IoPressureHigh may have fallen).
    expect(diagnosis.io.condition?.type).to.equal('IoPressureHigh');
    expect(diagnosis.done.remediation?.reason).to.match(/under verified IO pressure/);
    expect(diagnosis.done.actions.map((a) => `${a.kind} ${a.outcome}`)).to.include.members([
      'Cordon Succeeded',
      'Evict Succeeded',
    ]);
    expect(diagnosis.blocking.map((b) => b.name)).to.include('EvictionRate');
    expect(output).to.include(`sandbox-remediator diagnose demo-${id}-1`);

    // Left as it was found: --cleanup removed the demo's nodes, namespace and policy; nothing is cordoned.
    expect((await kubectl(['get', 'nodes', '-o', 'name'])).stdout).to.not.include(`demo-${id}-`);
    expect((await kubectl(['get', 'sandboxpolicies', '-o', 'name'])).stdout).to.not.include(`demo-${id}`);
  });
});
