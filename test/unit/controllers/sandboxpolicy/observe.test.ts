import { expect } from 'chai';
import {
  CONTROL_PLANE_LABEL,
  type ActionRecord,
  type ConditionStatus,
  type NodeStamps,
  type RemediationRecord,
  type SandboxHealthStatus,
} from '../../../../src/api/v1alpha1/index.js';
import {
  ioState,
  observeNode,
  type ObserveInput,
} from '../../../../src/controllers/sandboxpolicy/observe.js';
import {
  detectNodeFindings,
  detectStuckPods,
  indexFailureEvents,
  type EventView,
  type NodeFindings,
  type PodView,
} from '../../../../src/detection/index.js';
import { decideIoPressure, type IoObservation } from '../../../../src/policy/io-pressure.js';
import type { DetectionStatus } from '../../../../src/status/health-status.js';
import { aPod, anEvent, nameReservedMessage, secondsAfter, T0 } from '../../../support/builders.js';
import { aNode } from '../../../support/memory-cluster.js';

const NOW = secondsAfter(T0, 3600);
const ago = (seconds: number) => secondsAfter(NOW, -seconds);

const NETWORK_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "abc": plugin type="calico" failed (add): context deadline exceeded';
const IMAGE_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox image "registry.k8s.io/pause:3.9": failed to pull image';
const OTHER_MESSAGE =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = something nobody expected';

describe('ioState', () => {
  const table: {
    name: string;
    previousStatus?: ConditionStatus;
    /** What the readings said before, and for how long. */
    before?: [IoObservation, number];
    now: IoObservation;
    condition: string;
    io: string;
  }[] = [
    {
      name: 'over, not yet for sustainSeconds',
      before: ['Over', 10],
      now: 'Over',
      condition: 'False/ThresholdNotSustained',
      io: 'Rising',
    },
    {
      name: 'over for sustainSeconds',
      before: ['Over', 30],
      now: 'Over',
      condition: 'True/ThresholdSustained',
      io: 'High',
    },
    {
      name: 'still over after it rose',
      previousStatus: 'True',
      before: ['Over', 600],
      now: 'Over',
      condition: 'True/ThresholdSustained',
      io: 'High',
    },
    {
      name: 'under after high, recoverySeconds pending',
      previousStatus: 'True',
      before: ['Under', 60],
      now: 'Under',
      condition: 'True/RecoveryPending',
      io: 'Recovering',
    },
    {
      name: 'under after high for recoverySeconds',
      previousStatus: 'True',
      before: ['Under', 120],
      now: 'Under',
      condition: 'False/Recovered',
      io: 'Low',
    },
    { name: 'under and never high', now: 'Under', condition: 'False/BelowThresholds', io: 'Low' },
    {
      name: 'unknown readings after high',
      previousStatus: 'True',
      before: ['Over', 600],
      now: 'Unknown',
      condition: 'True/ReadingUnknown',
      io: 'Unknown',
    },
    {
      name: 'unknown readings, never high',
      previousStatus: 'False',
      now: 'Unknown',
      condition: 'Unknown/ReadingUnknown',
      io: 'Unknown',
    },
  ];
  for (const row of table) {
    it(`is ${row.io} for ${row.condition}: ${row.name}`, () => {
      const decision = decideIoPressure({
        previousStatus: row.previousStatus,
        previousTracking: row.before ? { observation: row.before[0], since: ago(row.before[1]) } : undefined,
        judgement: { observation: row.now, details: ['reading'] },
        now: NOW,
        sustainSeconds: 30,
        recoverySeconds: 120,
      });
      expect(`${decision.condition.status}/${decision.condition.reason}`).to.equal(row.condition);
      expect(ioState(decision)).to.equal(row.io);
    });
  }

  it('is Unknown without any IO decision (no source)', () => {
    expect(ioState(undefined)).to.equal('Unknown');
  });
});

const podOn = (
  name: string,
  waitedSeconds: number,
  controllerKind: string | null = 'ReplicaSet',
): PodView => {
  const built = aPod().named(name).onNode('n1').waitingSince(ago(waitedSeconds)).build();
  return controllerKind ? { ...built, controllerKind } : built;
};
const failing = (pod: PodView, message?: string): EventView =>
  (message === undefined ? anEvent().about(pod) : anEvent().about(pod).saying(message)).at(ago(5)).build();
const runningPod = (name: string): PodView => ({
  ...aPod().named(name).onNode('n1').running().labelled({ io: 'heavy' }).build(),
  controllerKind: 'StatefulSet',
});

function findingsFor(pods: readonly PodView[], events: readonly EventView[], minStuckPods = 1): NodeFindings {
  const stuck = detectStuckPods(pods, indexFailureEvents(events), { stuckThresholdSeconds: 60, now: NOW });
  return detectNodeFindings(stuck, ['n1'], minStuckPods).get('n1')!;
}

function detection(degraded?: { status: 'True' | 'False'; since: Date }): DetectionStatus {
  return {
    policy: 'p',
    state: 'Degraded',
    stuckPodCount: 0,
    stuckPods: [],
    causes: [],
    ioEvidence: 'IoSuspected',
    conditions: degraded
      ? [
          {
            type: 'SandboxCreationDegraded',
            status: degraded.status,
            reason: degraded.status === 'True' ? 'StuckPodsAboveThreshold' : 'NoStuckPods',
            message: '',
            lastTransitionTime: degraded.since.toISOString(),
          },
        ]
      : [],
  };
}

const record = (
  kind: ActionRecord['kind'],
  outcome: ActionRecord['outcome'],
  at: Date,
  extra: Partial<ActionRecord> = {},
): ActionRecord => ({
  kind,
  target: 'node/n1',
  time: at.toISOString(),
  outcome,
  dryRun: false,
  reason: 'SandboxCreationStuckOnIo',
  ...extra,
});
const evicted = (
  pod: PodView,
  outcome: ActionRecord['outcome'] = 'Succeeded',
  kind: 'Evict' | 'Migrate' = 'Evict',
) => record(kind, outcome, ago(30), { target: `pod/${pod.namespace}/${pod.name}`, uid: pod.uid });

const previousWith = (fields: Partial<SandboxHealthStatus>): SandboxHealthStatus => ({
  conditions: [],
  ...fields,
});
const dryRunRecord = (fields: Partial<RemediationRecord> = {}): RemediationRecord => ({
  policy: 'p',
  since: ago(600).toISOString(),
  cordoned: true,
  reason: 'Sandbox creation stuck from IO.',
  dryRun: true,
  ...fields,
});
const OUR_TAINT = { key: 'sandbox.remediator.io/io-pressure', value: 'true', effect: 'NoSchedule' };

function observe(overrides: Partial<ObserveInput> = {}) {
  return observeNode({
    node: aNode('n1'),
    findings: findingsFor([], []),
    io: undefined,
    detection: detection(),
    previous: undefined,
    dryRun: false,
    ioHeavyPods: [],
    evictionsInFlight: new Set(),
    ...overrides,
  });
}

describe('observeNode', () => {
  it('copies what the node says: name, readiness, control plane, cordon and taints', () => {
    const taint = { key: 'example.com/maintenance', effect: 'NoSchedule' };
    const facts = observe({
      node: {
        ...aNode('n1', { [CONTROL_PLANE_LABEL]: '' }),
        ready: false,
        unschedulable: true,
        taints: [taint],
      },
    });
    expect(facts).to.deep.include({
      name: 'n1',
      ready: false,
      controlPlane: true,
      unschedulable: true,
      taints: [taint],
    });
    expect(facts).not.to.have.property('stamps');
    expect(observe()).to.deep.include({
      ready: true,
      controlPlane: false,
      unschedulable: false,
      taints: [],
      migrated: 0,
    });
  });

  it('passes the IO decision on as its state', () => {
    const io = decideIoPressure({
      previousStatus: undefined,
      previousTracking: { observation: 'Over', since: ago(60) },
      judgement: { observation: 'Over', details: [] },
      now: NOW,
      sustainSeconds: 30,
      recoverySeconds: 120,
    });
    expect(observe({ io }).io).to.equal('High');
    expect(observe().io).to.equal('Unknown');
  });

  describe('degradedByIo', () => {
    const table: {
      name: string;
      pods: [string, string | undefined][];
      minStuckPods?: number;
      degradedByIo: boolean;
    }[] = [
      {
        name: 'IO causes only',
        pods: [
          ['a', undefined],
          ['b', 'NameReserved'],
        ],
        degradedByIo: true,
      },
      {
        name: 'IO as common as Network',
        pods: [
          ['a', 'NameReserved'],
          ['b', NETWORK_MESSAGE],
        ],
        degradedByIo: true,
      },
      {
        name: 'Network outnumbering IO',
        pods: [
          ['a', 'NameReserved'],
          ['b', NETWORK_MESSAGE],
          ['c', NETWORK_MESSAGE],
        ],
        degradedByIo: false,
      },
      { name: 'image pulls only', pods: [['a', IMAGE_MESSAGE]], degradedByIo: false },
      { name: 'no failure event yet (Unknown)', pods: [['a', 'none']], degradedByIo: false },
      {
        name: 'IO causes below minStuckPods',
        pods: [['a', 'NameReserved']],
        minStuckPods: 2,
        degradedByIo: false,
      },
    ];
    for (const row of table) {
      it(`is ${row.degradedByIo} for ${row.name}`, () => {
        const pods = row.pods.map(([name], i) => podOn(name, 600 - i));
        const events = row.pods.flatMap(([, message], i) => {
          const pod = pods[i]!;
          if (message === 'none') return [];
          return [failing(pod, message === 'NameReserved' ? nameReservedMessage(pod) : message)];
        });
        expect(observe({ findings: findingsFor(pods, events, row.minStuckPods) }).degradedByIo).to.equal(
          row.degradedByIo,
        );
      });
    }
  });

  describe('stuck and IO-heavy pods', () => {
    const nameReserved = podOn('nr', 600);
    const deadline = podOn('de', 300, null);
    const network = podOn('net', 900);
    const image = podOn('img', 500);
    const unknown = podOn('unk', 1000);
    const other = podOn('other', 400);
    const mirror = { ...podOn('static', 200, 'Node'), mirror: true };
    const pods = [nameReserved, deadline, network, image, unknown, other, mirror];
    const events = [
      failing(nameReserved, nameReservedMessage(nameReserved)),
      failing(deadline),
      failing(network, NETWORK_MESSAGE),
      failing(image, IMAGE_MESSAGE),
      failing(other, OTHER_MESSAGE),
      failing(mirror),
    ];
    const findings = findingsFor(pods, events);
    const names = (list: readonly { name: string }[]) => list.map((p) => p.name);

    it('keeps only pods stuck from an IO cause, longest-waiting first (Network, image, Other, Unknown excluded)', () => {
      expect(findings.stuckPods).to.have.lengthOf(7);
      expect(observe({ findings }).ioStuckPods).to.deep.equal([
        {
          namespace: 'default',
          name: 'nr',
          uid: nameReserved.uid,
          controllerKind: 'ReplicaSet',
          unlisted: true,
        },
        { namespace: 'default', name: 'de', uid: deadline.uid, unlisted: true },
        {
          namespace: 'default',
          name: 'static',
          uid: mirror.uid,
          controllerKind: 'Node',
          mirror: true,
          unlisted: true,
        },
      ]);
    });

    it('marks a stuck pod unlisted until the stored status lists it with an IO cause (its eviction waits for that)', () => {
      const record = (pod: PodView, cause: 'NameReserved' | 'DeadlineExceeded' | 'Network' | 'Unknown') => ({
        namespace: pod.namespace,
        name: pod.name,
        uid: pod.uid,
        waitingReason: 'ContainerCreating',
        waitingSince: '2026-01-01T00:00:00Z',
        cause,
        failureCount: 1,
      });
      // nr listed from IO; de listed with no cause yet; static listed as a network failure (its cause since changed).
      const stuckPods = [
        record(nameReserved, 'NameReserved'),
        record(deadline, 'Unknown'),
        record(mirror, 'Network'),
      ];
      const unlisted = (previous: { stuckPods: ReturnType<typeof record>[] }) =>
        observe({ findings, previous })
          .ioStuckPods.filter((p) => p.unlisted)
          .map((p) => p.name);
      expect(unlisted({ stuckPods })).to.deep.equal(['de', 'static']);
      // A full list (50) has no room for more: a pod not in it is counted there, not held back forever.
      const others = Array.from({ length: 47 }, (_, i) => record(podOn(`o${i}`, 100), 'NameReserved'));
      expect(unlisted({ stuckPods: [record(nameReserved, 'NameReserved'), ...others] })).to.deep.equal([
        'de',
        'static',
      ]);
      expect(
        unlisted({
          stuckPods: [
            record(nameReserved, 'NameReserved'),
            ...others,
            record(unknown, 'Unknown'),
            record(network, 'Network'),
          ],
        }),
      ).to.deep.equal([]);
    });

    it('leaves out pods already evicted or migrated (by uid), and those whose eviction is in flight', () => {
      const heavy = [runningPod('db-0'), runningPod('db-1'), runningPod('db-2')];
      const facts = observe({
        findings,
        ioHeavyPods: heavy,
        previous: previousWith({
          actions: [
            evicted(nameReserved),
            evicted(heavy[0]!, 'Succeeded', 'Migrate'),
            evicted(mirror, 'Failed'),
            evicted(heavy[1]!, 'Blocked', 'Migrate'),
            record('Evict', 'Succeeded', ago(20), { target: 'pod/default/static' }), // no uid: a replacement is another pod
          ],
        }),
        evictionsInFlight: new Set([deadline.uid, heavy[2]!.uid]),
      });
      expect(names(facts.ioStuckPods)).to.deep.equal(['static']);
      expect(names(facts.ioHeavyPods)).to.deep.equal(['db-1']);
      expect(facts.ioHeavyPods[0]).to.deep.equal({
        namespace: 'default',
        name: 'db-1',
        uid: heavy[1]!.uid,
        controllerKind: 'StatefulSet',
      });
    });

    it('leaves out pods a dry run reported as evicted, in a dry run only', () => {
      const previous = previousWith({ actions: [{ ...evicted(nameReserved), dryRun: true }] });
      expect(names(observe({ findings, previous, dryRun: true }).ioStuckPods)).to.deep.equal([
        'de',
        'static',
      ]);
      // A real run evicts them: a dry run changed nothing.
      expect(names(observe({ findings, previous }).ioStuckPods)).to.deep.equal(['nr', 'de', 'static']);
    });
  });

  describe('stamps', () => {
    it('in a dry run, takes the simulated stamps from the previous status, and shows them on the node', () => {
      const facts = observe({
        dryRun: true,
        previous: previousWith({
          remediation: dryRunRecord({ taint: 'sandbox.remediator.io/io-pressure=true:NoSchedule' }),
        }),
      });
      expect(facts.stamps).to.deep.equal({
        policy: 'p',
        since: ago(600),
        reason: 'Sandbox creation stuck from IO.',
        cordoned: true,
        taint: OUR_TAINT,
      } satisfies NodeStamps);
      expect(facts.unschedulable).to.equal(true);
      expect(facts.taints).to.deep.equal([OUR_TAINT]);
    });

    it('in a dry run, a simulated taint alone leaves the node schedulable and is not added twice', () => {
      const facts = observe({
        dryRun: true,
        node: { ...aNode('n1'), taints: [{ key: OUR_TAINT.key, effect: 'NoExecute' }] },
        previous: previousWith({
          remediation: dryRunRecord({
            cordoned: false,
            taint: 'sandbox.remediator.io/io-pressure=true:NoSchedule',
          }),
        }),
      });
      expect(facts.stamps).to.deep.include({ cordoned: false, taint: OUR_TAINT });
      expect(facts.unschedulable).to.equal(false);
      expect(facts.taints).to.deep.equal([{ key: OUR_TAINT.key, effect: 'NoExecute' }]);
    });

    it('outside a dry run, ignores simulated stamps', () => {
      const facts = observe({ dryRun: false, previous: previousWith({ remediation: dryRunRecord() }) });
      expect(facts).not.to.have.property('stamps');
      expect(facts).to.deep.include({ unschedulable: false, taints: [] });
    });

    it('in a dry run, ignores a record of real stamps (the node no longer carries them)', () => {
      const facts = observe({
        dryRun: true,
        previous: previousWith({ remediation: dryRunRecord({ dryRun: false }) }),
      });
      expect(facts).not.to.have.property('stamps');
      expect(facts.unschedulable).to.equal(false);
    });

    it('takes the real stamps from the node over simulated ones', () => {
      const real: NodeStamps = { policy: 'q', since: ago(60), reason: 'real', cordoned: false };
      const facts = observe({
        dryRun: true,
        node: { ...aNode('n1'), stamps: real },
        previous: previousWith({
          remediation: dryRunRecord({ taint: 'sandbox.remediator.io/io-pressure=true:NoSchedule' }),
        }),
      });
      expect(facts.stamps).to.deep.equal(real);
      expect(facts).to.deep.include({ unschedulable: false, taints: [] });
    });
  });

  describe('migrated', () => {
    const actions = [
      record('Evict', 'Succeeded', ago(40), { uid: 'e' }),
      record('Migrate', 'Failed', ago(50), { uid: 'f' }),
      record('Migrate', 'Succeeded', ago(100), { uid: 'm2' }),
      record('Migrate', 'Succeeded', ago(600), { uid: 'm1' }),
      record('Migrate', 'Succeeded', ago(700), { uid: 'm0' }), // an earlier remediation
    ];

    it('counts the successful migrations since the stamps say the remediation started', () => {
      const stamps: NodeStamps = { policy: 'p', since: ago(600), reason: 'r', cordoned: true };
      expect(
        observe({ node: { ...aNode('n1'), stamps }, previous: previousWith({ actions }) }).migrated,
      ).to.equal(2);
    });

    it('counts from the simulated stamps in a dry run', () => {
      const previous = previousWith({
        actions,
        remediation: dryRunRecord({ since: ago(100).toISOString() }),
      });
      expect(observe({ dryRun: true, previous }).migrated).to.equal(1);
    });

    it('is 0 on a node that carries no stamps', () => {
      expect(observe({ previous: previousWith({ actions }) }).migrated).to.equal(0);
    });
  });

  describe('lastUndoAt', () => {
    it('is the latest successful undo on recovery (actions are newest first)', () => {
      const previous = previousWith({
        actions: [
          record('Cordon', 'Succeeded', ago(10), { reason: 'SandboxCreationStuckOnIo' }),
          record('Untaint', 'Failed', ago(20), { reason: 'Recovered' }),
          record('Uncordon', 'Blocked', ago(25), { reason: 'Cooldown' }),
          record('Uncordon', 'Succeeded', ago(30), { reason: 'Recovered' }),
          record('Untaint', 'Succeeded', ago(31), { reason: 'Recovered' }),
          record('Uncordon', 'Succeeded', ago(900), { reason: 'Recovered' }),
        ],
      });
      expect(observe({ previous }).lastUndoAt).to.deep.equal(ago(30));
    });

    it('counts an Untaint alone', () => {
      const previous = previousWith({
        actions: [
          record('Cordon', 'Succeeded', ago(5)),
          record('Untaint', 'Succeeded', ago(50), { reason: 'Recovered' }),
        ],
      });
      expect(observe({ previous }).lastUndoAt).to.deep.equal(ago(50));
    });

    it('counts someone else reverting us, so the node is left alone for a cooldown', () => {
      const previous = previousWith({
        actions: [record('Uncordon', 'Succeeded', ago(10), { reason: 'UncordonedByOthers' })],
      });
      expect(observe({ previous }).lastUndoAt).to.deep.equal(ago(10));
    });

    it('is absent when nothing was undone', () => {
      const previous = previousWith({ actions: [record('Cordon', 'Succeeded', ago(10))] });
      expect(observe({ previous })).not.to.have.property('lastUndoAt');
    });
  });

  describe('quietSince', () => {
    it('is when SandboxCreationDegraded last turned False', () => {
      expect(observe({ detection: detection({ status: 'False', since: ago(77) }) }).quietSince).to.deep.equal(
        ago(77),
      );
    });

    it('is absent while the node is degraded, or before anything was detected', () => {
      expect(observe({ detection: detection({ status: 'True', since: ago(77) }) })).not.to.have.property(
        'quietSince',
      );
      expect(observe()).not.to.have.property('quietSince');
    });
  });
});
