// The health-check samples speak of our condition by its exact name, and wait longer than the full policy sample's
// escalation, so that the operator's remedies get their chance before a reboot (their CRDs check them too:
// test/integration/health-check-samples.test.ts).
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { NODE_CONDITION_TYPE } from '../../../src/api/v1alpha1/node-condition.js';
import { REPO_ROOT } from '../../support/manifests.js';

interface Sample {
  spec: {
    remediation?: { escalation?: { afterSeconds?: number } };
    unhealthyConditions?: { type: string; status: string; duration: string }[];
    checks?: { unhealthyNodeConditions?: { type: string; status: string; timeoutSeconds: number }[] };
  };
}
const read = (file: string) =>
  parse(readFileSync(join(REPO_ROOT, 'config', 'samples', file), 'utf8')) as Sample;
const seconds = (duration: string) => {
  const m = /^(\d+)(s|m|h)$/.exec(duration);
  if (!m) throw new Error(`not a duration the samples use: ${duration}`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600 }[m[2] as 's' | 'm' | 'h'];
};

describe('health-check samples', () => {
  const escalation = read('sandboxpolicy-full.yaml').spec.remediation?.escalation?.afterSeconds ?? 0;

  it('the full policy sample escalates', () => {
    expect(escalation).to.be.above(0);
  });

  it('NodeHealthCheck waits on SandboxCreationDegraded=True longer than the escalation, and keeps the Ready checks', () => {
    const conditions = read('health-checks/nodehealthcheck-sandbox.yaml').spec.unhealthyConditions ?? [];
    const ours = conditions.filter((c) => c.type === NODE_CONDITION_TYPE);
    expect(ours.map((c) => c.status)).to.deep.equal(['True']);
    expect(seconds(ours[0]!.duration)).to.be.above(escalation);
    expect(conditions.filter((c) => c.type === 'Ready').map((c) => c.status)).to.have.members([
      'False',
      'Unknown',
    ]);
  });

  it('MachineHealthCheck waits on SandboxCreationDegraded=True longer than the escalation, and keeps the Ready checks', () => {
    const conditions =
      read('health-checks/machinehealthcheck-sandbox.yaml').spec.checks?.unhealthyNodeConditions ?? [];
    const ours = conditions.filter((c) => c.type === NODE_CONDITION_TYPE);
    expect(ours.map((c) => c.status)).to.deep.equal(['True']);
    expect(ours[0]!.timeoutSeconds).to.be.above(escalation);
    expect(conditions.filter((c) => c.type === 'Ready').map((c) => c.status)).to.have.members([
      'False',
      'Unknown',
    ]);
  });
});
