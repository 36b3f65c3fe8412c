import { GROUP, VERSION } from '../api/v1alpha1/group.js';
import type { IoReadingStatus } from '../api/v1alpha1/index.js';
import { ApiClient, ApiError, type ApiAccess } from './rest.js';

export const AGENT_FIELD_MANAGER = 'sandbox-remediator-agent';

/**
 * Publishes the agent's reading into its node's SandboxHealth with server-side apply under its own field
 * manager, owning status.ioReading and nothing else (the operator owns the rest of the status). It speaks to the
 * apiserver through kube/rest.ts, not client-node: the agent runs on every node and must stay small.
 */
export class ReadingPublisher {
  private readonly client: ApiClient;
  private readonly path: string;

  constructor(
    access: ApiAccess,
    private readonly nodeName: string,
    options: { requestTimeoutMs?: number } = {},
  ) {
    this.client = new ApiClient(access, options);
    const query = new URLSearchParams({ fieldManager: AGENT_FIELD_MANAGER, force: 'true' });
    this.path = `/apis/${GROUP}/${VERSION}/sandboxhealths/${encodeURIComponent(nodeName)}/status?${query.toString()}`;
  }

  /** 'missing' when no SandboxHealth exists yet (no policy selects the node, or the operator has not run). */
  async publish(reading: IoReadingStatus): Promise<'published' | 'missing'> {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxHealth',
      metadata: { name: this.nodeName },
      status: { ioReading: reading },
    };
    try {
      await this.client.send({
        method: 'PATCH',
        path: this.path,
        contentType: 'application/apply-patch+yaml',
        body: JSON.stringify(body),
      });
      return 'published';
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return 'missing';
      throw err;
    }
  }

  close(): void {
    this.client.close();
  }
}
