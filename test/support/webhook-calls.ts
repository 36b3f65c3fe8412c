// The pacing webhook as the apiserver sees it: how often it called it (its own metrics), and where it is armed.
import { kubectl } from './cluster.js';

/** What the apiserver's own metrics count for the pacing webhook: its calls, and those that failed open. */
export async function webhookCalls(): Promise<{ calls: number; failedOpen: number }> {
  const { stdout, code, stderr } = await kubectl(['get', '--raw', '/metrics']);
  if (code !== 0) throw new Error(`kubectl get --raw /metrics: ${stderr}`);
  const sum = (metric: string) =>
    stdout
      .split('\n')
      .filter((l) => l.startsWith(`${metric}{`) && l.includes('name="pacing.sandbox.remediator.io"'))
      .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  return {
    calls: sum('apiserver_admission_webhook_admission_duration_seconds_count'),
    failedOpen: sum('apiserver_admission_webhook_fail_open_count'),
  };
}

/** The calls the apiserver made to the webhook while `create` ran. */
export async function callsDuring(
  create: () => Promise<unknown>,
): Promise<{ calls: number; failedOpen: number }> {
  const before = await webhookCalls();
  await create();
  const after = await webhookCalls();
  return { calls: after.calls - before.calls, failedOpen: after.failedOpen - before.failedOpen };
}

/** Our matchCondition's CEL in the configuration the apiserver reads. */
export async function armedAs(): Promise<string | undefined> {
  const { stdout } = await kubectl([
    'get',
    'mutatingwebhookconfiguration',
    'sandbox-remediator-pacing',
    '-o',
    'json',
  ]);
  const config = JSON.parse(stdout) as {
    webhooks: { matchConditions?: { name: string; expression: string }[] }[];
  };
  return config.webhooks[0]?.matchConditions?.find((c) => c.name === 'sandbox.remediator.io/armed')
    ?.expression;
}
/** Whether our matchCondition arms the webhook for this namespace (others, of earlier tests, may be listed too). */
export const armedFor = (expression: string | undefined, namespace: string) =>
  expression?.startsWith('request.namespace in [') === true && expression.includes(`'${namespace}'`);
