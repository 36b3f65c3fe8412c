// The one place @dot-i/k8s-operator is used (ADR 0002): the operator's outer lifecycle. Its Operator base
// class runs init() on start and aborts its (unused) watches on stop. Its CRD registration only creates what
// is missing, so --install-crds uses src/kube/crds.ts (server-side apply) instead (ADR 0002). The hot path
// (informers, queue, reconcile, writes) never goes through it: it has no cache, serialises every event
// in one global queue, and exits the process on any watch error.
import { setTimeout as sleep } from 'node:timers/promises';
import dotI from '@dot-i/k8s-operator';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { GROUP, RESOURCE_KINDS, VERSION } from '../api/v1alpha1/index.js';
import type { Logger } from '../observability/logger.js';
import { serverOf, withTimeout, type KubeConfig } from './client.js';
import { apiStatus, describeError, describeNoAnswer } from './errors.js';

const Operator = dotI.default;

export interface LifecycleHooks {
  start(): Promise<void>;
  stop(): Promise<void>;
  logger: Logger;
}

export class OperatorLifecycle extends Operator {
  constructor(private readonly hooks: LifecycleHooks) {
    super({
      info: (message: string) => {
        hooks.logger.info(message, { via: 'k8s-operator' });
      },
      debug: (message: string) => {
        hooks.logger.debug(message, { via: 'k8s-operator' });
      },
      warn: (message: string) => {
        hooks.logger.warn(message, { via: 'k8s-operator' });
      },
      error: (message: string) => {
        hooks.logger.error(message, { via: 'k8s-operator' });
      },
    });
  }

  protected async init(): Promise<void> {
    await this.hooks.start();
  }

  async shutdown(): Promise<void> {
    this.stop();
    await this.hooks.stop();
  }
}

/** Why the apiserver does not give the operator its own resources, in a line that says what to change. */
export interface ApiProblem {
  reason: 'Unreachable' | 'Unauthorized' | 'Forbidden' | 'CustomResourceDefinitionsMissing' | 'ApiFailing';
  message: string;
  error: string;
}

/**
 * Asks the apiserver for one object of each of the operator's resources, as the caches are about to; undefined
 * when it answers both. One request each, so an apiserver that is down, credentials it refuses, missing RBAC
 * and missing CustomResourceDefinitions each get their own line, where the informers only say "Restarting".
 */
export async function findApiProblem(kc: KubeConfig, timeoutMs = 5000): Promise<ApiProblem | undefined> {
  const server = serverOf(kc) ?? '(no server)';
  const api = kc.makeApiClient(CustomObjectsApi);
  const missing: string[] = [];
  for (const { plural } of RESOURCE_KINDS) {
    try {
      await api.listClusterCustomObject(
        { group: GROUP, version: VERSION, plural, limit: 1 },
        withTimeout(timeoutMs),
      );
    } catch (err) {
      const error = describeError(err);
      const status = apiStatus(err);
      if (status?.code === 404) {
        missing.push(`${plural}.${GROUP}`);
        continue;
      }
      if (status?.code === 401) {
        const user = kc.getCurrentUser()?.name ?? '';
        return {
          reason: 'Unauthorized',
          message: `Waiting for ${server} to accept the credentials of kubeconfig user ${JSON.stringify(user)} (HTTP 401 Unauthorized): fix them, or pass --kubeconfig=<a kubeconfig this cluster accepts>`,
          error,
        };
      }
      if (status?.code === 403)
        return {
          reason: 'Forbidden',
          message: `Waiting for permission to list ${plural}.${GROUP} on ${server} (HTTP 403 Forbidden): bind the operator's ClusterRole (config/rbac) to the user or ServiceAccount it runs as`,
          error,
        };
      const noAnswer = status ? undefined : describeNoAnswer(err, timeoutMs);
      return noAnswer
        ? {
            reason: 'Unreachable',
            message: `Waiting for the apiserver at ${server}: ${noAnswer}; start it, or pass --kubeconfig=<a kubeconfig whose server is up>`,
            error,
          }
        : { reason: 'ApiFailing', message: `Waiting for the apiserver at ${server}: ${error}`, error };
    }
  }
  if (missing.length === 0) return undefined;
  return {
    reason: 'CustomResourceDefinitionsMissing',
    message: `Waiting for the CustomResourceDefinitions ${missing.join(', ')}, which ${server} does not serve: install them (kubectl apply -f crds/, or sandbox-remediator crds | kubectl apply -f -), or start the operator once with --install-crds`,
    error: 'HTTP 404',
  };
}

export interface StartReportOptions {
  /** The first question, if not started by then: a healthy start asks nothing. */
  firstAfterMs?: number;
  everyMs?: number;
  /** The same problem is logged again at most this often. */
  repeatMs?: number;
  requestTimeoutMs?: number;
}

/**
 * Until `started` settles, says why the operator is not ready yet: every few seconds it asks findApiProblem and
 * logs a warning when the problem changes, and at most every repeatMs while it stays. The operator waits rather
 * than exits for what the apiserver answers: each can change while it runs (the apiserver comes up, RBAC or CRDs
 * are applied, a token rotates), and a crash loop's back-off would delay it by minutes once fixed.
 */
export async function reportUntilStarted(
  kc: KubeConfig,
  logger: Logger,
  started: Promise<unknown>,
  {
    firstAfterMs = 2000,
    everyMs = 5000,
    repeatMs = 30_000,
    requestTimeoutMs = 5000,
  }: StartReportOptions = {},
): Promise<void> {
  const done = new AbortController();
  const finish = () => {
    done.abort();
  };
  started.then(finish, finish);
  // When each reason was last told: alternating reasons must not make every one of them repeat every 5 s.
  const told = new Map<ApiProblem['reason'], number>();
  try {
    for (let wait = firstAfterMs; ; wait = everyMs) {
      await sleep(wait, undefined, { signal: done.signal, ref: false });
      const problem = await findApiProblem(kc, requestTimeoutMs);
      if (done.signal.aborted) return;
      if (!problem) {
        told.clear();
        continue;
      }
      const now = performance.now();
      if (now - (told.get(problem.reason) ?? -Infinity) < repeatMs) continue;
      logger.warn(problem.message, { reason: problem.reason, error: problem.error });
      told.set(problem.reason, now);
    }
  } catch (err) {
    if (!done.signal.aborted) throw err;
  }
}
