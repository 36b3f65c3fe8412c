// `sandbox-remediator diagnose [NODE]`: reads (GET and LIST only), diagnoses (pure), prints.
import { KubeconfigError, loadKubeConfig } from '../kube/client.js';
import {
  DIAGNOSE_TIMEOUT_MS,
  DiagnosisReadError,
  readClusterOverviewInput,
  readNodeDiagnosisInput,
} from '../kube/diagnosis-reads.js';
import { diagnoseCluster } from '../diagnose/cluster.js';
import { diagnoseNode } from '../diagnose/node.js';
import type { Diagnosis } from '../diagnose/schema.js';
import { formatDiagnosis } from '../diagnose/text.js';

export const OUTPUT_FORMATS = ['text', 'json'] as const;

export interface DiagnoseFlags {
  kubeconfig?: string;
  context?: string;
  output: (typeof OUTPUT_FORMATS)[number];
}

/** A Node's name is a DNS subdomain; anything else would also slip into a field selector. */
const NODE_NAME = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

/** Exit status: 0 when it ran (whatever the node's state), 1 when the node is unknown, 2 for usage and connection. */
export async function runDiagnose(
  node: string | undefined,
  flags: DiagnoseFlags,
  out: { write(text: string): unknown } = process.stdout,
  err: { write(text: string): unknown } = process.stderr,
): Promise<number> {
  if (node !== undefined && !NODE_NAME.test(node)) {
    err.write(`diagnose: ${JSON.stringify(node)} is not a node name (kubectl get nodes lists them)\n`);
    return 2;
  }
  let diagnosis: Diagnosis;
  try {
    const kc = loadKubeConfig(flags.kubeconfig, {
      requestTimeoutMs: DIAGNOSE_TIMEOUT_MS,
      ...(flags.context !== undefined ? { context: flags.context } : {}),
    });
    diagnosis =
      node === undefined
        ? diagnoseCluster({ ...(await readClusterOverviewInput(kc)), now: new Date() })
        : diagnoseNode({ ...(await readNodeDiagnosisInput(kc, node)), now: new Date() });
  } catch (e) {
    if (e instanceof KubeconfigError) {
      err.write(`diagnose: ${e.message}; pass --kubeconfig=<path>\n`);
      return 2;
    }
    if (e instanceof DiagnosisReadError) {
      err.write(`diagnose: ${e.message}\n`);
      return 2;
    }
    // Not "no such node" (exit 1): one line, and the exit status of a problem reading the cluster.
    err.write(
      `diagnose: could not diagnose: ${e instanceof Error ? e.message : String(e)} (a bug? please report it)\n`,
    );
    return 2;
  }
  if (diagnosis.kind === 'NodeDiagnosis' && !diagnosis.found.node && !diagnosis.found.sandboxHealth) {
    err.write(
      `diagnose: no node ${JSON.stringify(diagnosis.node)} and no SandboxHealth of that name: check the name (kubectl get nodes), or the cluster (--kubeconfig, --context)\n`,
    );
    return 1;
  }
  out.write(flags.output === 'json' ? `${JSON.stringify(diagnosis, null, 2)}\n` : formatDiagnosis(diagnosis));
  return 0;
}
