import { GROUP, VERSION } from '../api/v1alpha1/group.js';
import type {
  IoLimitReport,
  IoLimitsAnswer,
  IoReadingStatus,
  WantedIoLimitSpec,
} from '../api/v1alpha1/index.js';
import { ApiClient, ApiError, type ApiAccess } from './rest.js';

export const AGENT_FIELD_MANAGER = 'sandbox-remediator-agent';
/** The agent's report of its IO limits is applied under a manager of its own: a reading's apply never drops it. */
export const AGENT_LIMITS_FIELD_MANAGER = 'sandbox-remediator-agent-io-limits';

/** What the SandboxHealth the apiserver answered with says of IO limits (its schema checked it when written). */
function limitsOf(body: string): IoLimitsAnswer {
  const object = JSON.parse(body) as {
    spec?: { ioLimits?: WantedIoLimitSpec[] };
    status?: { ioLimits?: IoLimitReport };
  };
  const wanted = object.spec?.ioLimits;
  return { wanted: Array.isArray(wanted) ? wanted : [], report: object.status?.ioLimits };
}

/**
 * Publishes the agent's reading into its node's SandboxHealth with server-side apply under its own field
 * manager, owning status.ioReading and nothing else (the operator owns the rest of the status). It speaks to the
 * apiserver through kube/rest.ts, not client-node: the agent runs on every node and must stay small.
 */
export class ReadingPublisher {
  private readonly client: ApiClient;
  private readonly path: string;
  private readonly limitsPath: string;

  constructor(
    access: ApiAccess,
    private readonly nodeName: string,
    options: { requestTimeoutMs?: number } = {},
  ) {
    this.client = new ApiClient(access, options);
    const query = new URLSearchParams({ fieldManager: AGENT_FIELD_MANAGER, force: 'true' });
    const status = `/apis/${GROUP}/${VERSION}/sandboxhealths/${encodeURIComponent(nodeName)}/status`;
    this.path = `${status}?${query.toString()}`;
    const limits = new URLSearchParams({ fieldManager: AGENT_LIMITS_FIELD_MANAGER, force: 'true' });
    this.limitsPath = `${status}?${limits.toString()}`;
  }

  /**
   * The IO limits the SandboxHealth holds, as the apiserver answered the write; 'missing' when no SandboxHealth exists
   * yet (no policy selects the node, or the operator has not run).
   */
  async publish(reading: IoReadingStatus): Promise<IoLimitsAnswer | 'missing'> {
    return this.apply(this.path, { ioReading: reading });
  }

  /** Writes the agent's report of the IO limits it applied, under its own field manager. */
  async publishLimits(report: IoLimitReport): Promise<IoLimitsAnswer | 'missing'> {
    return this.apply(this.limitsPath, { ioLimits: report });
  }

  private async apply(path: string, status: object): Promise<IoLimitsAnswer | 'missing'> {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxHealth',
      metadata: { name: this.nodeName },
      status,
    };
    try {
      const response = await this.client.send({
        method: 'PATCH',
        path,
        contentType: 'application/apply-patch+yaml',
        body: JSON.stringify(body),
      });
      return limitsOf(response.body);
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return 'missing';
      throw err;
    }
  }

  close(): void {
    this.client.close();
  }
}
