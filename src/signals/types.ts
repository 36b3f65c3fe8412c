import type { IoReadingStatus } from '../api/v1alpha1/index.js';

/**
 * A source of IO readings per node. refresh() fetches what it needs for these nodes (a no-op for sources fed
 * by the cache); read() returns the latest reading or undefined when unknown. Never 0 for unknown.
 */
export interface IoSource {
  readonly kind: string;
  refresh(nodeNames: readonly string[]): Promise<void>;
  read(nodeName: string): SourcedReading | undefined;
  /** How often to come back for fresh readings when the source is polled rather than pushed. */
  readonly pollMs?: number;
  /** Why a node has no reading, when the source knows (shown as the IoPressureHigh reason). */
  problem?(nodeName: string): SourceProblem | undefined;
}

/** A reading, and for the agent's when the apiserver took it (its clock, not the agent's). */
export type SourcedReading = IoReadingStatus & { writtenTime?: string };

/** A source's reason for having no reading of a node: SourceForbidden (RBAC), SourceUnavailable. */
export interface SourceProblem {
  reason: 'SourceForbidden' | 'SourceUnavailable';
  message: string;
}
