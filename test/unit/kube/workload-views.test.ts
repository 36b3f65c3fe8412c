// The slim views of what rolls out: each kind's hold read into the same words, from a list's shape or a watch's.
import { expect } from 'chai';
import { replaceWith } from '../../../src/actuation/workload-change.js';
import { rolloutOf } from '../../../src/detection/index.js';
import {
  argoRolloutView,
  daemonSetView,
  deploymentView,
  statefulSetView,
} from '../../../src/kube/workload-views.js';

const meta = (annotations: Record<string, string> = {}) => ({
  namespace: 'shop',
  name: 'w',
  uid: 'u',
  generation: 4,
  creationTimestamp: '2026-12-01T00:00:00Z',
  annotations,
});
const ours = (extra: Record<string, string>) => ({
  'sandbox.remediator.io/paused-by': 'p',
  'sandbox.remediator.io/paused-since': '2026-12-01T00:00:00Z',
  'sandbox.remediator.io/pause-reason': 'RolloutQueued',
  ...extra,
});

describe('workload views', () => {
  it('reads a StatefulSet: held by its owner at a partition >= replicas or OnDelete, by us only at the partition we set', () => {
    const sts = (strategy: unknown, annotations: Record<string, string> = {}, status: object = {}) =>
      statefulSetView({
        kind: 'StatefulSet',
        metadata: meta(annotations),
        spec: { replicas: 3, updateStrategy: strategy },
        status: {
          observedGeneration: 4,
          updatedReplicas: 3,
          readyReplicas: 3,
          currentRevision: 'a',
          updateRevision: 'a',
          ...status,
        },
      } as never)!;
    expect(sts({ type: 'RollingUpdate', rollingUpdate: { partition: 0 } })).to.include({
      paused: false,
      rollingOut: false,
      revision: 'a',
    });
    expect(sts({ type: 'RollingUpdate', rollingUpdate: { partition: 3 } })).to.include({ paused: true });
    expect(sts({ type: 'OnDelete' })).to.include({ paused: true, rollingOut: false });
    expect(
      sts(
        { type: 'RollingUpdate', rollingUpdate: { partition: 0 } },
        {},
        { updatedReplicas: 1, updateRevision: 'b' },
      ),
    ).to.include({ rollingOut: true, revision: 'b' });
    const held = {
      'sandbox.remediator.io/held-update-strategy':
        '{"type":"RollingUpdate","rollingUpdate":{"partition":0}}',
      'sandbox.remediator.io/held-partition': '3',
    };
    const ours3 = sts({ type: 'RollingUpdate', rollingUpdate: { partition: 3 } }, ours(held), {
      updatedReplicas: 1,
      updateRevision: 'b',
    });
    expect(ours3).to.include({ paused: true, rollingOut: true });
    expect(ours3.held).to.deep.equal({
      strategy: { type: 'RollingUpdate', rollingUpdate: { partition: 0 } },
      partition: 3,
    });
    expect(
      sts({ type: 'RollingUpdate', rollingUpdate: { partition: 2 } }, ours(held)),
      'its owner changed it',
    ).to.include({ paused: false });
    expect(
      sts({ type: 'RollingUpdate', rollingUpdate: { partition: 3 } }, ours({})),
      'a stamp with no held strategy: not ours to restore',
    ).to.include({ paused: false });
  });

  it('reads a DaemonSet: OnDelete is held, ours while it stays OnDelete, and its template generation as the revision', () => {
    const ds = (strategy: unknown, annotations: Record<string, string> = {}) =>
      daemonSetView({
        kind: 'DaemonSet',
        metadata: meta({ 'deprecated.daemonset.template.generation': '7', ...annotations }),
        spec: { updateStrategy: strategy },
        status: { observedGeneration: 4, desiredNumberScheduled: 5, updatedNumberScheduled: 2 },
      } as never)!;
    expect(ds({ type: 'RollingUpdate' })).to.include({ paused: false, rollingOut: true, revision: '7' });
    expect(ds({ type: 'OnDelete' })).to.include({ paused: true, rollingOut: false });
    const held = { 'sandbox.remediator.io/held-update-strategy': '{"type":"RollingUpdate"}' };
    expect(ds({ type: 'OnDelete' }, ours(held))).to.include({ paused: true, rollingOut: true });
    expect(ds({ type: 'RollingUpdate' }, ours(held)), 'switched back by its owner').to.include({
      paused: false,
    });
    expect(ds({ type: 'RollingUpdate' }).settling, 'pods left to update').to.equal(undefined);
  });

  it('says a StatefulSet or DaemonSet whose pods are all updated but not all ready is settling, not updating', () => {
    const ds = daemonSetView({
      kind: 'DaemonSet',
      metadata: meta({}),
      spec: { updateStrategy: { type: 'RollingUpdate' } },
      status: {
        observedGeneration: 4,
        desiredNumberScheduled: 5,
        updatedNumberScheduled: 5,
        numberAvailable: 4,
      },
    } as never)!;
    expect(ds).to.include({ rollingOut: true, settling: true });
    const sts = (status: object) =>
      statefulSetView({
        kind: 'StatefulSet',
        metadata: meta({}),
        spec: { replicas: 3, updateStrategy: { type: 'RollingUpdate' } },
        status: { observedGeneration: 4, currentRevision: 'a', updateRevision: 'b', ...status },
      } as never)!;
    expect(sts({ updatedReplicas: 3, readyReplicas: 2 })).to.include({ rollingOut: true, settling: true });
    expect(sts({ updatedReplicas: 2, readyReplicas: 2 }).settling, 'a pod left to update').to.equal(
      undefined,
    );
    expect(sts({ updatedReplicas: 3, readyReplicas: 3 }).settling, 'done').to.equal(undefined);
  });

  it('reads an Argo Rollout: spec.paused, or a pause condition of its own, holds it; its current pod hash is the revision', () => {
    const ro = (spec: object, status: object, annotations: Record<string, string> = {}) =>
      argoRolloutView({
        kind: 'Rollout',
        metadata: meta(annotations),
        spec: { replicas: 2, ...spec },
        status,
      } as never)!;
    expect(ro({}, { currentPodHash: 'b', stableRS: 'a', updatedReplicas: 1 })).to.include({
      paused: false,
      rollingOut: true,
      revision: 'b',
    });
    expect(ro({}, { currentPodHash: 'a', stableRS: 'a', updatedReplicas: 2, phase: 'Healthy' })).to.include({
      rollingOut: false,
    });
    expect(ro({}, { pauseConditions: [{ reason: 'CanaryPauseStep' }] })).to.include({ paused: true });
    expect(
      ro({}, { currentPodHash: 'b', stableRS: 'a', updatedReplicas: 0, abort: true }),
      'aborted',
    ).to.include({ rollingOut: false });
    expect(
      ro({}, { currentPodHash: 'b', stableRS: 'a', updatedReplicas: 1, phase: 'Degraded' }),
      'Degraded',
    ).to.include({ rollingOut: false });
    expect(ro({ paused: true }, {}, ours({}))).to.include({ paused: true });
    expect(ro({}, {}, ours({})), 'resumed by its owner').to.include({ paused: false });
  });

  it('names the rollout of a pod, with the revision it runs', () => {
    const pod = (controllerKind: string, controllerName: string, labels: Record<string, string>) => ({
      namespace: 'shop',
      controllerKind,
      controllerName,
      labels,
    });
    expect(rolloutOf(pod('StatefulSet', 'db', { 'controller-revision-hash': 'db-5' }))).to.deep.equal({
      key: 'StatefulSet/shop/db',
      revision: 'db-5',
    });
    expect(rolloutOf(pod('DaemonSet', 'agent', { 'pod-template-generation': '3' }))).to.deep.equal({
      key: 'DaemonSet/shop/agent',
      revision: '3',
    });
    expect(rolloutOf(pod('ReplicaSet', 'front-abc', { 'rollouts-pod-template-hash': 'abc' }))).to.deep.equal({
      key: 'Rollout/shop/front',
      revision: 'abc',
    });
    expect(rolloutOf(pod('ReplicaSet', 'web-xyz', { 'pod-template-hash': 'xyz' }))).to.deep.equal({
      key: 'Deployment/shop/web',
    });
    expect(rolloutOf(pod('Job', 'j', {}))).to.equal(undefined);
  });

  it('builds the merge patch that puts a strategy back exactly, removing what the hold added', () => {
    expect(
      replaceWith({ type: 'OnDelete' }, { type: 'RollingUpdate', rollingUpdate: { maxSurge: 0 } }),
    ).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { maxSurge: 0 },
    });
    expect(
      replaceWith({ type: 'RollingUpdate', rollingUpdate: { partition: 3, maxUnavailable: 1 } }, {}),
    ).to.deep.equal({
      type: null,
      rollingUpdate: null,
    });
    expect(
      replaceWith(
        { rollingUpdate: { partition: 3, maxUnavailable: 1 } },
        { rollingUpdate: { partition: 0 } },
      ),
    ).to.deep.equal({
      rollingUpdate: { partition: 0, maxUnavailable: null },
    });
  });

  it('reads a Deployment past its own progress deadline as stalled, whatever the reason given: rolling out, no slot', () => {
    const deployment = (progressing: object | undefined) =>
      deploymentView({
        kind: 'Deployment',
        metadata: meta(),
        spec: { replicas: 3 },
        status: {
          observedGeneration: 4,
          replicas: 4,
          updatedReplicas: 1,
          availableReplicas: 3,
          conditions: progressing ? [{ type: 'Progressing', ...progressing }] : [],
        },
      } as never)!;
    const read = (progressing: object | undefined) => {
      const view = deployment(progressing);
      return [view.rollingOut, view.stalled ?? false];
    };
    expect(read(undefined)).to.deep.equal([true, false]);
    expect(read({ status: 'True', reason: 'ReplicaSetUpdated' })).to.deep.equal([true, false]);
    expect(read({ status: 'False', reason: 'ProgressDeadlineExceeded' })).to.deep.equal([true, true]);
    expect(read({ status: 'False', reason: 'SomethingElse' })).to.deep.equal([true, true]);
  });

  it("reads where a workload's pods may go from its template, and no exemption from its labels", () => {
    const view = deploymentView({
      kind: 'Deployment',
      metadata: { ...meta(), labels: { 'app.kubernetes.io/name': 'sandbox-remediator' } },
      spec: {
        template: {
          spec: {
            nodeSelector: { disk: 'ssd' },
            affinity: {
              nodeAffinity: {
                requiredDuringSchedulingIgnoredDuringExecution: {
                  nodeSelectorTerms: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] }],
                },
              },
            },
            tolerations: [{ key: 'dedicated', operator: 'Exists', effect: 'NoSchedule' }],
          },
        },
      },
    } as never)!;
    expect(view.placement).to.deep.equal({
      nodeSelector: { disk: 'ssd' },
      requiredTerms: [
        { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }], matchFields: [] },
      ],
      tolerations: [{ key: 'dedicated', operator: 'Exists', effect: 'NoSchedule' }],
    });
    expect(view).to.not.have.property('ownComponent');
  });
});
