import type { SandboxPolicySpec } from '../api/v1alpha1/index.js';
import type { ClusterCache } from '../ports/cluster.js';
import { AgentSource, NodeConditionSource } from './cache-sources.js';
import { KubeletSummarySource } from './kubelet-summary.js';
import { PrometheusSource } from './prometheus.js';
import type { IoSource } from './types.js';

export interface SourceDeps {
  cache: ClusterCache;
  fetchKubeletSummary: (nodeName: string) => Promise<unknown>;
  onSourceError?: (nodeName: string, err: unknown) => void;
  onSourceRecovered?: (nodeName: string) => void;
}

/**
 * Builds the IO source a policy's spec asks for. The policy's memory (src/controllers) keeps it while the policy's
 * ioPressure settings stay the same, so polled sources keep their last readings between passes, and forgets it with
 * the policy.
 */
export class SourceFactory {
  constructor(private readonly deps: SourceDeps) {}

  build(spec: SandboxPolicySpec): IoSource {
    const io = spec.ioPressure;
    switch (io.source) {
      case 'agent':
        return new AgentSource(this.deps.cache);
      case 'nodeCondition':
        return new NodeConditionSource(this.deps.cache, io.nodeCondition.type);
      case 'prometheus':
        // Validation guarantees the settings exist for this source.
        if (!io.prometheus)
          throw new Error('spec.ioPressure.prometheus is required when source is prometheus');
        return new PrometheusSource(io.prometheus);
      case 'kubeletSummary':
        return new KubeletSummarySource(
          (node) => this.deps.fetchKubeletSummary(node),
          undefined,
          (node, err) => this.deps.onSourceError?.(node, err),
          (node) => this.deps.onSourceRecovered?.(node),
        );
    }
  }
}
