// PURE: the SandboxHealth status patch the Reporter sends: of the keys the operator writes only.
import { isDeepStrictEqual } from 'node:util';
import type { SandboxHealthStatus } from '../api/v1alpha1/index.js';
import { mergePatchFrom, stored } from './merge-patch.js';
import type { HealthStatus } from './remediation-status.js';

/**
 * The status keys the operator writes, removed when the desired status drops them (a merge patch of the desired keys
 * alone would leave them, and the node would be rewritten on every pass). ioReading is the agent's, or a polled
 * source's reading written only when it moved: it is written when desired, and never removed.
 */
const OWNED_KEYS = [
  'policy',
  'state',
  'stuckPodCount',
  'stuckPods',
  'causes',
  'ioEvidence',
  'ioPressure',
  'ioCause',
  'topConsumer',
  'runtime',
  'lastAction',
  'actions',
  'remediation',
  'blocked',
  'conditions',
] as const satisfies readonly (keyof HealthStatus)[];

/** The merge patch that makes the stored status the desired one; empty when it already is. */
export function healthPatch(
  previous: SandboxHealthStatus | undefined,
  desired: HealthStatus,
): Record<string, unknown> {
  return mergePatchFrom(previous, desired, desired.ioReading ? [...OWNED_KEYS, 'ioReading'] : OWNED_KEYS);
}

/** Whether two statuses are the same as the API stores them (no undefined fields). */
export const sameStatus = (a: unknown, b: unknown): boolean => isDeepStrictEqual(stored(a), stored(b));
