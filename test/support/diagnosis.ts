// Inputs for the diagnosis, as the reads hand them over: a node in the middle of a remediation, and small changes to it.
import type { Condition, SandboxHealthStatus, SandboxPolicyStatus } from '../../src/api/v1alpha1/index.js';
import { readStamps } from '../../src/api/v1alpha1/index.js';
import type { PolicyObject } from '../../src/ports/cluster.js';
import type { NodeView } from '../../src/detection/index.js';
import type { DiagnosedNode, NodeDiagnosisInput } from '../../src/diagnose/inputs.js';
import { secondsAfter, T0 } from './builders.js';

export { T0, secondsAfter };
/** When the diagnosis is made: ten minutes into the incident. */
export const NOW = secondsAfter(T0, 600);
export const at = (seconds: number) => secondsAfter(T0, seconds).toISOString();

export const HOLDER = 'a3f1c09e5b7d2468ace0b1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6f70';
export const POD_UID = '00000000-0000-4000-8000-0000000000a1';
export const OTHER_UID = '00000000-0000-4000-8000-0000000000a2';
export const reservedMessage = (pod: string, ns: string, uid: string, id = HOLDER) =>
  `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "${pod}_${ns}_${uid}_0": name "${pod}_${ns}_${uid}_0" is reserved for "${id}"`;

export const condition = (
  type: string,
  status: Condition['status'],
  reason: string,
  message = '',
  since = at(60),
): Condition => ({ type, status, reason, message, lastTransitionTime: since });

/** n1 under remediation: two pods stuck on a reserved name, IO proven by the agent, cordoned, one pod evicted. */
export function remediatingStatus(): SandboxHealthStatus {
  return {
    policy: 'p1',
    state: 'Remediating',
    stuckPodCount: 2,
    stuckPods: [
      {
        namespace: 'shop',
        name: 'web-1',
        uid: POD_UID,
        waitingReason: 'ContainerCreating',
        waitingSince: at(0),
        cause: 'NameReserved',
        failureCount: 10,
        causeSince: at(130),
        lastMessage: reservedMessage('web-1', 'shop', POD_UID),
        reservedFor: HOLDER,
      },
      {
        namespace: 'shop',
        name: 'web-2',
        uid: OTHER_UID,
        waitingReason: 'ContainerCreating',
        waitingSince: at(30),
        cause: 'DeadlineExceeded',
        failureCount: 2,
        lastMessage: 'rpc error: code = DeadlineExceeded desc = context deadline exceeded',
      },
    ],
    causes: [
      { cause: 'DeadlineExceeded', count: 1 },
      { cause: 'NameReserved', count: 1 },
    ],
    ioEvidence: 'IoSuspected',
    ioReading: {
      source: 'agent',
      observedTime: at(595),
      heartbeatSeconds: 3,
      psiSomeAvg10Percent: 38.24,
      psiSomeAvg60Percent: 30.1,
      psiFullAvg10Percent: 12.5,
      diskBusyPercent: 97.3,
      blockedProcesses: 14,
      kworkerCpuPercent: 42.5,
      devices: [{ name: 'sda', busyPercent: 97.3, awaitMs: 180.2, inFlight: 31 }],
      dStateTasks: [
        { pid: 4242, comm: 'kworker/u8:2', wchan: 'io_schedule', runtime: false },
        { pid: 5151, comm: 'runc:[2:INIT]', wchan: 'do_mount', runtime: true },
      ],
    },
    ioPressure: { observation: 'Over', since: at(100) },
    runtime: {
      version: 'containerd://1.6.0',
      predatesMountFix: false,
      note: 'Has the mount fix; 1.6.21 / 1.7.1 carry later fixes for this incident.',
    },
    lastAction: 'Evict Succeeded',
    actions: [
      {
        kind: 'Evict',
        target: 'pod/shop/web-0',
        uid: '00000000-0000-4000-8000-0000000000a0',
        time: at(140),
        outcome: 'Succeeded',
        dryRun: false,
        reason: 'SandboxCreationStuckOnIo',
        message: 'Stuck creating its sandbox on n1: a replacement gets a new sandbox name on another node.',
      },
      {
        kind: 'Cordon',
        target: 'node/n1',
        time: at(135),
        outcome: 'Succeeded',
        dryRun: false,
        reason: 'SandboxCreationStuckOnIo',
        message: 'Sandbox creation stuck from IO under verified IO pressure (3 pod(s)).',
      },
    ],
    remediation: {
      policy: 'p1',
      since: at(135),
      cordoned: true,
      reason: 'Sandbox creation stuck from IO under verified IO pressure (3 pod(s)).',
      dryRun: false,
    },
    blocked: [],
    conditions: [
      condition('SandboxCreationDegraded', 'True', 'StuckPodsAboveThreshold', '2 pod(s) waiting', at(3)),
      condition(
        'IoPressureHigh',
        'True',
        'ThresholdSustained',
        `Over threshold since ${at(100)}: PSI some avg10 >= 30%.`,
        at(130),
      ),
      condition('Cordoned', 'True', 'CordonedForIoPressure', 'Cordoned by policy p1', at(135)),
      condition('RolloutsThrottled', 'False', 'NoneThrottled', 'No rollout is held for this node.'),
    ],
  };
}

export const STAMPS = {
  'sandbox.remediator.io/remediated-by': 'p1',
  'sandbox.remediator.io/remediated-since': at(135),
  'sandbox.remediator.io/remediation-reason':
    'Sandbox creation stuck from IO under verified IO pressure (3 pod(s)).',
  'sandbox.remediator.io/cordoned': 'true',
};

export function aNode(
  name = 'n1',
  annotations: Record<string, string> = STAMPS,
  unschedulable = true,
): DiagnosedNode {
  const view: NodeView = {
    name,
    uid: `uid-${name}`,
    labels: {},
    unschedulable,
    ready: true,
    runtimeVersion: 'containerd://1.6.0',
    taints: unschedulable ? [{ key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' }] : [],
    conditions: [{ type: 'Ready', status: 'True' }],
  };
  const stamps = readStamps(annotations, view.uid);
  if (stamps) view.stamps = stamps;
  return { view, annotations };
}

/** A valid policy with fast clocks, as the operator has judged it. */
export function aPolicy(spec: Record<string, unknown> = {}, status?: SandboxPolicyStatus): PolicyObject {
  return {
    name: 'p1',
    uid: 'uid-p1',
    generation: 1,
    createdAt: T0,
    spec: {
      ioPressure: {
        sustainSeconds: 30,
        recoverySeconds: 120,
        staleAfterSeconds: 90,
        thresholds: { psiSomeAvg10Percent: 30 },
      },
      safety: { cooldownSeconds: 300 },
      ...spec,
    },
    status: status ?? {
      conditions: [
        condition('Valid', 'True', 'SpecValid', 'The spec is valid.'),
        condition('Active', 'True', 'Watching', 'Watching 3 node(s).'),
        condition(
          'StormDetected',
          'False',
          'WithinLimit',
          '1 unhealthy node(s), within maxUnhealthyNodes (1).',
        ),
      ],
    },
  };
}

/** The whole input for n1 under remediation; `change` adjusts it. */
export function remediatingInput(
  change: (input: NodeDiagnosisInput) => void = () => undefined,
): NodeDiagnosisInput {
  const input: NodeDiagnosisInput = {
    nodeName: 'n1',
    now: NOW,
    health: { name: 'n1', uid: 'uid-h1', nodeName: 'n1', status: remediatingStatus() },
    node: aNode(),
    policy: aPolicy(),
    failureEvents: new Map([
      [
        POD_UID,
        {
          uid: 'e1',
          type: 'Warning',
          reason: 'FailedCreatePodSandBox',
          message: reservedMessage('web-1', 'shop', POD_UID, 'b'.repeat(64)),
          involvedKind: 'Pod',
          involvedNamespace: 'shop',
          involvedName: 'web-1',
          involvedUid: POD_UID,
          count: 37,
          lastTime: secondsAfter(T0, 598),
          reportingController: 'kubelet',
          reportingInstance: 'n1',
        },
      ],
    ]),
    nodeEvents: [
      {
        type: 'Normal',
        reason: 'Cordoned',
        message: 'Sandbox creation stuck from IO',
        count: 1,
        lastTime: secondsAfter(T0, 135),
      },
      {
        type: 'Warning',
        reason: 'IoPressureHigh',
        message: 'Over threshold',
        count: 1,
        lastTime: secondsAfter(T0, 130),
      },
      {
        type: 'Normal',
        reason: 'EvictedStuckPod',
        message: 'evicted shop/web-0',
        count: 1,
        lastTime: secondsAfter(T0, 140),
      },
    ],
    heldRollouts: [],
    gatedPods: [],
    unavailable: [],
  };
  change(input);
  return input;
}
