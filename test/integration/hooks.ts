// Mocha root hooks: use the running local cluster, or start one (and stop it afterwards unless KEEP_CLUSTER=1).
import { hack, isClusterUp, startCluster } from '../support/cluster.js';

let startedHere = false;

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(60 * 60 * 1000); // a cold machine builds the control plane from source first
    if (await isClusterUp()) {
      console.error('[integration] using the running cluster in .cluster/');
      return;
    }
    console.error('[integration] starting a local cluster (hack/cluster/up.sh)');
    await startCluster();
    startedHere = true;
  },
  async afterAll(this: Mocha.Context) {
    this.timeout(60_000);
    if (startedHere && process.env.KEEP_CLUSTER !== '1') {
      const result = await hack('down.sh');
      console.error(
        `[integration] stopped the cluster this run started${result.code === 0 ? '' : `: ${result.stderr}`}`,
      );
    }
  },
};
