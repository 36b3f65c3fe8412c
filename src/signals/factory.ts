import { readFile } from 'node:fs/promises';
import type { CredentialSource, SandboxPolicySpec } from '../api/v1alpha1/index.js';
import type { ClusterCache } from '../ports/cluster.js';
import { AgentSource, NodeConditionSource } from './cache-sources.js';
import { KubeletSummarySource } from './kubelet-summary.js';
import { PrometheusSource, type PrometheusCredentials } from './prometheus.js';
import type { IoSource } from './types.js';

type PrometheusSourceSpec = NonNullable<SandboxPolicySpec['ioPressure']['prometheus']>;

export interface SourceDeps {
  cache: ClusterCache;
  fetchKubeletSummary: (nodeName: string) => Promise<unknown>;
  /** One key of a Secret in the operator's namespace (a policy's Prometheus credentials). */
  readSecret?: (name: string, key: string) => Promise<string>;
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
        return new PrometheusSource(
          io.prometheus,
          undefined,
          undefined,
          undefined,
          credentialReader(io.prometheus, this.deps.readSecret),
        );
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

/** How long a credential read from a Secret is used before it is read again (a file is read before each poll). */
const SECRET_TTL_MS = 60_000;

/** Reads the CA and the token a policy names: its files on each poll, its Secrets at most once a minute. */
export function credentialReader(
  settings: Pick<PrometheusSourceSpec, 'ca' | 'bearerToken'>,
  readSecret: ((name: string, key: string) => Promise<string>) | undefined,
  readText: (path: string) => Promise<string> = (path) => readFile(path, 'utf8'),
  now: () => number = Date.now,
): () => Promise<PrometheusCredentials> {
  const cached = new Map<string, { value: string; at: number }>();
  const read = async (source: CredentialSource | undefined, what: string): Promise<string | undefined> => {
    if (!source) return undefined;
    if (source.file !== undefined) return readText(source.file);
    const { secret } = source;
    if (!secret) return undefined;
    const key = `${secret.name}/${secret.key}`;
    const hit = cached.get(key);
    if (hit && now() - hit.at < SECRET_TTL_MS) return hit.value;
    if (!readSecret) throw new Error(`the ${what} is in a Secret, and this operator reads none`);
    const value = await readSecret(secret.name, secret.key);
    cached.set(key, { value, at: now() });
    return value;
  };
  return async () => {
    const [ca, token] = await Promise.all([
      read(settings.ca, 'CA'),
      read(settings.bearerToken, 'bearer token'),
    ]);
    return {
      ...(ca === undefined ? {} : { ca }),
      // A token file ends with a newline more often than not; a header cannot hold one.
      ...(token === undefined ? {} : { bearerToken: token.trim() }),
    };
  };
}
