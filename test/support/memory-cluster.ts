// An in-memory ClusterCache + StatusWriter + EventRecorder for reconcile tests: the writer applies what it
// is given to the same store the cache reads, and records every call.
import type {
  SandboxHealthStatus,
  SandboxPolicySpecInput,
  SandboxPolicyStatus,
} from '../../src/api/v1alpha1/index.js';
import type {
  ClusterCache,
  EventRecorder,
  HealthObject,
  PolicyObject,
  StatusWriter,
} from '../../src/controllers/ports.js';
import {
  indexFailureEvents,
  type EventView,
  type NodeView,
  type PodView,
} from '../../src/detection/index.js';
import type { Transition } from '../../src/status/health-status.js';
import { T0 } from './builders.js';

export function aNode(name: string, labels: Record<string, string> = {}): NodeView {
  return {
    name,
    uid: `uid-${name}`,
    labels,
    unschedulable: false,
    ready: true,
    taints: [],
    conditions: [],
    runtimeVersion: 'containerd://1.6.0',
  };
}

export class MemoryCluster implements ClusterCache, StatusWriter, EventRecorder {
  readonly policyMap = new Map<string, PolicyObject>();
  readonly nodeMap = new Map<string, NodeView>();
  pods: PodView[] = [];
  events: EventView[] = [];
  readonly healthMap = new Map<string, HealthObject>();
  readonly writes: string[] = [];
  readonly recorded: Transition[] = [];

  addPolicy(name: string, spec: SandboxPolicySpecInput | Record<string, unknown>, createdAt = T0): this {
    this.policyMap.set(name, { name, uid: `uid-${name}`, generation: 1, createdAt, spec });
    return this;
  }
  addNodes(...nodes: NodeView[]): this {
    for (const node of nodes) this.nodeMap.set(node.name, node);
    return this;
  }

  policies() {
    return this.policyMap.values();
  }
  policy(name: string) {
    return this.policyMap.get(name);
  }
  nodes() {
    return this.nodeMap.values();
  }
  node(name: string) {
    return this.nodeMap.get(name);
  }
  pendingPodsOn(nodeName: string) {
    return this.pods.filter((p) => p.nodeName === nodeName && p.phase === 'Pending');
  }
  failureEventsByPod() {
    return indexFailureEvents(this.events);
  }
  healths() {
    return this.healthMap.values();
  }
  health(name: string) {
    return this.healthMap.get(name);
  }

  createHealth(node: NodeView): Promise<void> {
    this.writes.push(`create health/${node.name}`);
    this.healthMap.set(node.name, { name: node.name, uid: `h-${node.name}`, nodeName: node.name });
    return Promise.resolve();
  }
  patchHealthStatus(name: string, status: Partial<SandboxHealthStatus>): Promise<void> {
    this.writes.push(`patch health/${name}`);
    const health = this.healthMap.get(name);
    if (!health) throw new Error(`no health ${name}`);
    health.status = JSON.parse(JSON.stringify({ ...health.status, ...status })) as SandboxHealthStatus;
    return Promise.resolve();
  }
  deleteHealth(name: string): Promise<void> {
    this.writes.push(`delete health/${name}`);
    this.healthMap.delete(name);
    return Promise.resolve();
  }
  patchPolicyStatus(name: string, status: SandboxPolicyStatus): Promise<void> {
    this.writes.push(`patch policy/${name}`);
    const policy = this.policyMap.get(name);
    if (policy) policy.status = JSON.parse(JSON.stringify(status)) as SandboxPolicyStatus;
    return Promise.resolve();
  }
  record(transition: Transition): Promise<void> {
    this.recorded.push(transition);
    return Promise.resolve();
  }
  takeWrites(): string[] {
    return this.writes.splice(0);
  }
  takeEvents(): string[] {
    return this.recorded.splice(0).map((t) => `${t.target.kind}/${t.target.name} ${t.type} ${t.reason}`);
  }
}
