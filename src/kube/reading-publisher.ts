import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { GROUP, VERSION, type IoReadingStatus } from '../api/v1alpha1/index.js';
import { isNotFound } from './errors.js';

export const AGENT_FIELD_MANAGER = 'sandbox-remediator-agent';

/**
 * Publishes the agent's reading into its node's SandboxHealth with server-side apply under its own field
 * manager, owning status.ioReading and nothing else (the operator owns the rest of the status).
 */
export class ReadingPublisher {
  private readonly custom: CustomObjectsApi;
  constructor(
    kc: KubeConfig,
    private readonly nodeName: string,
  ) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
  }

  /** 'missing' when no SandboxHealth exists yet (no policy selects the node, or the operator has not run). */
  async publish(reading: IoReadingStatus): Promise<'published' | 'missing'> {
    try {
      await this.custom.patchClusterCustomObjectStatus(
        {
          group: GROUP,
          version: VERSION,
          plural: 'sandboxhealths',
          name: this.nodeName,
          fieldManager: AGENT_FIELD_MANAGER,
          force: true,
          body: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: 'SandboxHealth',
            metadata: { name: this.nodeName },
            status: { ioReading: reading },
          },
        },
        setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
      );
      return 'published';
    } catch (err) {
      if (isNotFound(err)) return 'missing';
      throw err;
    }
  }
}
