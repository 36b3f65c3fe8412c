import { expect } from 'chai';
import type { CoreV1Event } from '@kubernetes/client-node';
import { classifyFailureMessage } from '../../src/detection/index.js';
import {
  api,
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  hack,
  podOn,
  waitingReasons,
} from '../support/cluster.js';

describe('incident injector on kwok nodes', function () {
  const cleanup = new Cleanup();
  afterEach(() => cleanup.run());

  async function startIncident(node: string, extra: string[] = []) {
    const started = await hack('incident', [
      'start',
      '--node',
      node,
      '--interval-seconds',
      '1',
      '--max-duration-seconds',
      '300',
      ...extra,
    ]);
    expect(started.code, started.stderr).to.equal(0);
    cleanup.add(() => hack('incident', ['stop', '--node', node]));
  }

  const sandboxEvents = async (namespace: string, pod: string): Promise<CoreV1Event[]> => {
    const { core } = api();
    const list = await core.listNamespacedEvent({
      namespace,
      fieldSelector: `involvedObject.name=${pod},reason=FailedCreatePodSandBox`,
    });
    return list.items;
  };

  it('holds new pods on the node in ContainerCreating with a growing Warning event, and releases them on stop', async () => {
    const { core } = api();
    const namespace = await createNamespace(cleanup);
    const { names } = await createNodes(cleanup, 2);
    const [sick, healthy] = names as [string, string];
    await startIncident(sick);

    await core.createNamespacedPod({ namespace, body: podOn('stuck', sick) });
    await core.createNamespacedPod({ namespace, body: podOn('fine', healthy) });

    await eventually('the healthy node to run its pod', async () => {
      const pod = await core.readNamespacedPod({ name: 'fine', namespace });
      return pod.status?.phase === 'Running';
    });
    const stuck = await eventually('the pod on the sick node to wait in ContainerCreating', async () => {
      const pod = await core.readNamespacedPod({ name: 'stuck', namespace });
      return waitingReasons(pod).includes('ContainerCreating') ? pod : undefined;
    });
    expect(stuck.status?.phase).to.equal('Pending');
    expect(stuck.spec?.nodeName).to.equal(sick);

    // As kubelet on a real node writes them (test/fixtures/lab/): the first attempt's deadline, then an Event of
    // its own for the reserved name.
    const reservedEvent = (events: CoreV1Event[]) =>
      events.find((e) => e.message?.includes('is reserved for'));
    const events = await eventually('the deadline Event and the reserved-name Event', async () => {
      const list = await sandboxEvents(namespace, 'stuck');
      return reservedEvent(list) ? list : undefined;
    });
    const deadline = events.find((e) => e.message?.includes('DeadlineExceeded'));
    const first = reservedEvent(events);
    expect(deadline?.message).to.equal(
      'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded',
    );
    expect(deadline?.count).to.equal(1);
    for (const e of [deadline, first]) {
      expect(e).to.include({ type: 'Warning', reason: 'FailedCreatePodSandBox' });
      expect(e!.involvedObject.uid).to.equal(stuck.metadata?.uid);
    }
    const classified = classifyFailureMessage(first!.message ?? '');
    expect(classified.cause).to.equal('NameReserved');
    expect(classified.name).to.include({ pod: 'stuck', namespace, uid: stuck.metadata?.uid, attempt: 0 });
    expect(classified.reservedFor).to.match(/^[0-9a-f]{64}$/);

    await eventually('the event to repeat with a growing count', async () => {
      const event = reservedEvent(await sandboxEvents(namespace, 'stuck'));
      return (event?.count ?? 0) >= 3 && event!.lastTimestamp! > first!.firstTimestamp!;
    });
    // Still stuck while the incident lasts.
    expect(waitingReasons(await core.readNamespacedPod({ name: 'stuck', namespace }))).to.deep.equal([
      'ContainerCreating',
    ]);

    const stopped = await hack('incident', ['stop', '--node', sick]);
    expect(stopped.code, stopped.stderr).to.equal(0);
    await eventually('the stuck pod to run after the incident', async () => {
      const pod = await core.readNamespacedPod({ name: 'stuck', namespace });
      return pod.status?.phase === 'Running';
    });
  });

  it('renders a custom message per pod (a CNI failure here)', async () => {
    const { core } = api();
    const namespace = await createNamespace(cleanup);
    const { names } = await createNodes(cleanup, 1);
    const message =
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "{id}": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.244.1.1-10.244.1.254';
    await startIncident(names[0]!, ['--message', message]);
    await core.createNamespacedPod({ namespace, body: podOn('cni', names[0]!) });
    const [event] = await eventually('the CNI event', async () => {
      const events = await sandboxEvents(namespace, 'cni');
      return events.length > 0 ? events : undefined;
    });
    expect(event!.message).to.match(/failed to setup network for sandbox "[0-9a-f]{64}"/);
    expect(classifyFailureMessage(event!.message!).cause).to.equal('Network');
  });

  it('refuses a node that does not exist, with the apiserver message', async () => {
    const result = await hack('incident', ['start', '--node', 'no-such-node']);
    expect(result.code).to.not.equal(0);
    expect(result.stderr).to.contain('nodes "no-such-node" not found');
  });
});
