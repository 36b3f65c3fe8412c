// What the controllers write of their own: SandboxHealth objects, both kinds' status, and Events. The actuator
// (src/actuation) is the port for what they change on other people's objects.
import type {
  RolloutKind,
  SandboxHealthStatus,
  SandboxPolicyStatus,
  WantedIoLimitSpec,
} from '../api/v1alpha1/index.js';
import type { NodeView } from '../detection/index.js';

/** Writes the operator's own objects. Implementations patch only what they are given. */
export interface StatusWriter {
  createHealth(node: NodeView): Promise<void>;
  /**
   * Resolves with the object's new resourceVersion and status (the API's merge of the patch), as returned. With
   * `after`, only if the status's reportId still is `after`, tested by the API as it applies the write (a JSON Patch):
   * each key of `status` is set whole, or removed when null; rejected with OutOfTurnError otherwise.
   */
  patchHealthStatus(
    name: string,
    status: HealthStatusPatch,
    after?: string,
  ): Promise<{ version?: string; status?: SandboxHealthStatus }>;
  deleteHealth(name: string): Promise<void>;
  /**
   * Writes a SandboxHealth's spec.ioLimits whole (empty: removed), only if it still holds `read`, tested by the API as
   * it applies the write; an absent list (`read` undefined) is added only to the object's `version`. Resolves with
   * the new resourceVersion. A list changed since (a person lifted a limit) is a 409, so it is never written over.
   */
  patchHealthIoLimits(
    name: string,
    limits: readonly WantedIoLimitSpec[],
    read: readonly WantedIoLimitSpec[] | undefined,
    version: string | undefined,
  ): Promise<string | undefined>;
  /** Resolves with the policy's new resourceVersion (undefined when it is gone or none was returned). */
  patchPolicyStatus(name: string, status: SandboxPolicyStatus): Promise<string | undefined>;
}

/** A JSON merge patch of a SandboxHealth status: a key set to null is removed. */
export type HealthStatusPatch = { [K in keyof SandboxHealthStatus]?: unknown };

/** One Event: what happened to which object, in words for kubectl describe. */
export interface Transition {
  target:
    | { kind: 'Node'; name: string; uid: string }
    | { kind: 'Pod'; namespace: string; name: string; uid: string }
    | { kind: 'SandboxPolicy'; name: string; uid: string }
    | { kind: RolloutKind; namespace: string; name: string; uid: string };
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface EventRecorder {
  record(transition: Transition): Promise<void>;
}

/** What registering found: done (written now or already so), or a configuration that is not there to fill in. */
export type Registration = { registered: true; changed: boolean } | { registered: false; why: string };
