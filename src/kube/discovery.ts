// What the cluster serves beyond the built-in kinds, asked once at start-up: whether Argo Rollouts is installed.
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from '../observability/log.js';
import { ARGO_ROLLOUTS } from './actuator.js';
import { describeError, isNotFound } from './errors.js';

/**
 * Whether the apiserver serves argoproj.io/v1alpha1 rollouts. Asked by discovery (no RBAC on CRDs needed), and said
 * once either way: when it is not served, the operator does not watch Rollouts until it restarts.
 */
export async function servesArgoRollouts(kc: KubeConfig, logger: Logger, attempts = 3): Promise<boolean> {
  const api = kc.makeApiClient(CustomObjectsApi);
  for (let attempt = 1; ; attempt++) {
    try {
      const list = await api.getAPIResources(ARGO_ROLLOUTS);
      const served = list.resources.some((r) => r.name === 'rollouts');
      logger.info(
        served
          ? 'Argo Rollouts is installed: Rollouts are throttled too'
          : 'argoproj.io/v1alpha1 serves no rollouts: Rollouts are not watched (restart the operator after installing Argo Rollouts)',
      );
      return served;
    } catch (err) {
      if (isNotFound(err)) {
        logger.info(
          'Argo Rollouts is not installed: Rollouts are not watched (restart the operator after installing it)',
        );
        return false;
      }
      if (attempt >= attempts) {
        logger.warn('Could not tell whether Argo Rollouts is installed: Rollouts are not watched', {
          error: describeError(err),
        });
        return false;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000 * attempt));
    }
  }
}
