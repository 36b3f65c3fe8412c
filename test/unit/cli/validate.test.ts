import { expect } from 'chai';
import { validatePolicyDocuments } from '../../../src/cli/validate.js';

describe('validatePolicyDocuments', () => {
  it('reports each SandboxPolicy document, skipping other kinds', () => {
    const text = [
      'apiVersion: sandbox.remediator.io/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: ok}\nspec: {}',
      'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}',
      'apiVersion: sandbox.remediator.io/v1\nkind: SandboxPolicy\nmetadata: {name: bad}\nspec: {detection: {minStuckPods: 0}}',
    ].join('\n---\n');
    const reports = validatePolicyDocuments(text, 'f.yaml');
    expect(reports.map((r) => [r.source, r.name, r.problems.map((p) => p.field)])).to.deep.equal([
      ['f.yaml#0', 'ok', []],
      ['f.yaml#2', 'bad', ['apiVersion', 'spec.detection.minStuckPods']],
    ]);
  });

  it('reports YAML syntax errors instead of throwing', () => {
    const [report] = validatePolicyDocuments('kind: SandboxPolicy\n  bad: [indent', 'broken.yaml');
    expect(report?.problems[0]?.field).to.equal('(yaml)');
  });
});
