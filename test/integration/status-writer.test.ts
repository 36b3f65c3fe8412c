// The SandboxHealth status writes on the real apiserver: a write sent before the one it follows is back is fenced on
// that one's reportId (a JSON Patch test), so the two never land out of order, while the agent's readings go between.
import { expect } from 'chai';
import { OutOfTurnError } from '../../src/kube/errors.js';
import { KubeStatusWriter } from '../../src/kube/writer.js';
import { TerminalError } from '../../src/runtime/controller.js';
import { Cleanup, kubeConfig, kubectl, uniqueName } from '../support/cluster.js';
import { applyCrds } from '../support/operator-process.js';

describe('SandboxHealth status writes on the real apiserver', function () {
  const cleanup = new Cleanup();
  const writer = () => new KubeStatusWriter(kubeConfig());
  after(() => cleanup.run());
  before(async function () {
    this.timeout(120_000);
    await applyCrds();
  });

  /** A SandboxHealth of no node (no owner: the garbage collector leaves it), removed after the test. */
  async function aHealth(): Promise<string> {
    const name = uniqueName('writes');
    const manifest = JSON.stringify({
      apiVersion: 'sandbox.remediator.io/v1alpha1',
      kind: 'SandboxHealth',
      metadata: { name },
      spec: { nodeName: name },
    });
    const created = await kubectl(['create', '-f', '-'], manifest);
    expect(created.code, created.stderr).to.equal(0);
    cleanup.add(() => kubectl(['delete', 'sandboxhealth', name, '--ignore-not-found']));
    return name;
  }
  /** What a write that must fail failed with (undefined when it did not). */
  const refusal = (write: Promise<unknown>) =>
    write.then(
      () => undefined,
      (err: unknown) => err,
    );
  const stored = async (name: string) => {
    const got = await kubectl(['get', 'sandboxhealth', name, '-o', 'json']);
    return (JSON.parse(got.stdout) as { status?: Record<string, unknown> }).status ?? {};
  };
  /** The agent's write: a merge patch of the reading alone, under its own field manager. */
  const agentReading = (name: string, percent: number) =>
    kubectl([
      'patch',
      'sandboxhealth',
      name,
      '--subresource=status',
      '--type=merge',
      '--field-manager=sandbox-remediator-agent',
      '-p',
      JSON.stringify({
        status: {
          ioReading: {
            source: 'agent',
            observedTime: new Date().toISOString(),
            psiSomeAvg10Percent: percent,
          },
        },
      }),
    ]);

  it('lands a write that follows the one before it, with the agent writing between, and refuses one out of turn', async () => {
    const name = await aHealth();
    const w = writer();
    const first = await w.patchHealthStatus(name, {
      stuckPodCount: 1,
      lastAction: 'Cordon Succeeded',
      reportId: 'a',
    });
    expect(first.status?.reportId, 'kept by the schema').to.equal('a');
    expect((await agentReading(name, 70)).code).to.equal(0);

    // Follows a: set whole, one key removed; the agent's reading between them is no conflict.
    const second = await w.patchHealthStatus(
      name,
      { stuckPodCount: 2, lastAction: null, reportId: 'b' },
      'a',
    );
    expect(second.status).to.include({ stuckPodCount: 2, reportId: 'b' });
    expect(second.status).to.not.have.property('lastAction');
    expect(second.status?.ioReading?.psiSomeAvg10Percent).to.equal(70);

    // Claims to follow a, which b followed: refused, and nothing of it written.
    const refused = await refusal(w.patchHealthStatus(name, { stuckPodCount: 9, reportId: 'c' }, 'a'));
    expect(refused).to.be.instanceOf(OutOfTurnError);
    expect(await stored(name)).to.include({ stuckPodCount: 2, reportId: 'b' });
  });

  it('tells a follower the schema refuses apart from one out of turn: refused for what it says, as a merge patch would be', async () => {
    const name = await aHealth();
    const w = writer();
    await w.patchHealthStatus(name, { stuckPodCount: 1, reportId: 'a' });
    let refused = await refusal(w.patchHealthStatus(name, { stuckPodCount: -1, reportId: 'b' }, 'a'));
    expect(refused).to.be.instanceOf(TerminalError);
    expect(refused).to.not.be.instanceOf(OutOfTurnError);
    // A key it removes that is not there: the API cannot apply it either, and nothing of it is written.
    refused = await refusal(
      w.patchHealthStatus(name, { lastAction: null, stuckPodCount: 3, reportId: 'c' }, 'a'),
    );
    expect(refused).to.be.instanceOf(OutOfTurnError);
    expect(await stored(name)).to.include({ stuckPodCount: 1, reportId: 'a' });
  });

  it('refuses a write that follows one on an object that is gone', async () => {
    const name = await aHealth();
    const w = writer();
    await w.patchHealthStatus(name, { stuckPodCount: 1, reportId: 'a' });
    expect((await kubectl(['delete', 'sandboxhealth', name])).code).to.equal(0);
    const refused = await refusal(w.patchHealthStatus(name, { stuckPodCount: 2, reportId: 'b' }, 'a'));
    expect(refused).to.be.instanceOf(OutOfTurnError);
  });

  it('never lands two writes sent together out of order: the second lands after the first or not at all', async function () {
    this.timeout(120_000);
    const name = await aHealth();
    const w = writer();
    await w.patchHealthStatus(name, { stuckPodCount: 0, reportId: 'start' });
    const outcomes = { landed: 0, refused: 0 };
    for (let i = 1; i <= 30; i++) {
      const before = `r${i}-0`;
      await w.patchHealthStatus(name, { stuckPodCount: 0, reportId: before });
      // Both on the wire at once: the first a merge patch, the second fenced on it.
      const [firstWrite, secondWrite] = await Promise.allSettled([
        w.patchHealthStatus(name, { stuckPodCount: 1, reportId: `r${i}-1` }),
        w.patchHealthStatus(name, { stuckPodCount: 2, reportId: `r${i}-2` }, `r${i}-1`),
      ]);
      expect(firstWrite.status, `round ${i}`).to.equal('fulfilled');
      const status = await stored(name);
      if (secondWrite.status === 'fulfilled') {
        outcomes.landed++;
        expect(status, `round ${i}: the second stands`).to.include({ stuckPodCount: 2, reportId: `r${i}-2` });
      } else {
        outcomes.refused++;
        expect(secondWrite.reason, `round ${i}`).to.be.instanceOf(OutOfTurnError);
        expect(status, `round ${i}: the first stands`).to.include({ stuckPodCount: 1, reportId: `r${i}-1` });
      }
    }
    console.log(
      `      [status-writer] of 30 pairs: ${outcomes.landed} both landed, ${outcomes.refused} refused`,
    );
  });
});
