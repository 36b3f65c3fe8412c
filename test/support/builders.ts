// Builders that read like prose: aPod().onNode('n1').waitingSince(t).build()
import type { ContainerView, EventView, PodView, WorkloadView } from '../../src/detection/index.js';

let serial = 0;
const nextUid = () => {
  serial++;
  return `00000000-0000-4000-8000-${serial.toString(16).padStart(12, '0')}`;
};

export const T0 = new Date('2026-11-30T10:00:00Z');
export const secondsAfter = (base: Date, seconds: number) => new Date(base.getTime() + seconds * 1000);

/** A Deployment in shop, rolling out at generation 2, unpaused and unstamped, created at T0. */
export const aRollingDeployment = (name: string, overrides: Partial<WorkloadView> = {}): WorkloadView => ({
  kind: 'Deployment',
  namespace: 'shop',
  name,
  uid: `uid-${name}`,
  generation: 2,
  paused: false,
  createdAt: T0,
  rollingOut: true,
  ...overrides,
});

class PodBuilder {
  private pod: PodView = {
    uid: nextUid(),
    namespace: 'default',
    name: `pod-${serial}`,
    phase: 'Pending',
    createdAt: T0,
    deleting: false,
    labels: {},
    containers: [{ name: 'app', init: false, state: 'waiting', reason: 'ContainerCreating' }],
  };

  named(name: string, namespace = 'default'): this {
    this.pod.name = name;
    this.pod.namespace = namespace;
    return this;
  }
  withUid(uid: string): this {
    this.pod.uid = uid;
    return this;
  }
  onNode(nodeName: string): this {
    this.pod.nodeName = nodeName;
    return this;
  }
  waitingSince(time: Date): this {
    this.pod.scheduledAt = time;
    return this;
  }
  createdAt(time: Date): this {
    this.pod.createdAt = time;
    return this;
  }
  inPhase(phase: string): this {
    this.pod.phase = phase;
    return this;
  }
  deleting(): this {
    this.pod.deleting = true;
    return this;
  }
  withContainers(...containers: ContainerView[]): this {
    this.pod.containers = containers;
    return this;
  }
  waitingWith(reason: string): this {
    return this.withContainers({ name: 'app', init: false, state: 'waiting', reason });
  }
  running(): this {
    this.pod.phase = 'Running';
    return this.withContainers({ name: 'app', init: false, state: 'running' });
  }
  labelled(labels: Record<string, string>): this {
    this.pod.labels = labels;
    return this;
  }
  build(): PodView {
    return { ...this.pod };
  }
}

export const aPod = () => new PodBuilder();

class EventBuilder {
  private event: EventView = {
    uid: nextUid(),
    type: 'Warning',
    reason: 'FailedCreatePodSandBox',
    message:
      'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded',
    involvedKind: 'Pod',
    involvedNamespace: 'default',
    involvedName: 'pod',
    count: 1,
    lastTime: T0,
    reportingController: 'kubelet',
    reportingInstance: '',
  };

  /** About this pod, written by the kubelet of its node (as writtenBy says otherwise). */
  about(pod: PodView): this {
    this.event.involvedNamespace = pod.namespace;
    this.event.involvedName = pod.name;
    this.event.involvedUid = pod.uid;
    this.event.reportingInstance = pod.nodeName ?? '';
    return this;
  }
  aboutNameOnly(pod: PodView): this {
    this.event.involvedNamespace = pod.namespace;
    this.event.involvedName = pod.name;
    this.event.reportingInstance = pod.nodeName ?? '';
    delete this.event.involvedUid;
    return this;
  }
  /** Who the Event says wrote it (source.component and source.host). */
  writtenBy(component: string, host: string): this {
    this.event.reportingController = component;
    this.event.reportingInstance = host;
    return this;
  }
  withReason(reason: string): this {
    this.event.reason = reason;
    return this;
  }
  saying(message: string): this {
    this.event.message = message;
    return this;
  }
  times(count: number): this {
    this.event.count = count;
    return this;
  }
  at(time: Date): this {
    this.event.lastTime = time;
    return this;
  }
  build(): EventView {
    return { ...this.event };
  }
}

export const anEvent = () => new EventBuilder();

/** A kubelet NameReserved message for a pod, as the real incident showed it. */
export function nameReservedMessage(pod: Pick<PodView, 'name' | 'namespace' | 'uid'>, attempt = 0): string {
  const name = `${pod.name}_${pod.namespace}_${pod.uid}_${attempt}`;
  return `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "${name}": name "${name}" is reserved for "${'ab'.repeat(32)}"`;
}
