import { expect } from 'chai';
import fc from 'fast-check';
import {
  labelValueProblem,
  qualifiedNameProblem,
  resolveIntOrPercent,
  selectorProblems,
  validateSandboxPolicySpec,
} from '../../../src/api/v1alpha1/index.js';

const fieldsOf = (raw: unknown) => validateSandboxPolicySpec(raw).problems.map((p) => p.field);

describe('validateSandboxPolicySpec', () => {
  it('fills every default into an empty spec', () => {
    const result = validateSandboxPolicySpec({});
    expect(result.valid).to.equal(true);
    if (!result.valid) return;
    expect(result.spec.detection).to.deep.equal({ stuckThresholdSeconds: 180, minStuckPods: 1 });
    expect(result.spec.ioPressure).to.include({ source: 'agent', sustainSeconds: 30, recoverySeconds: 120 });
    expect(result.spec.remediation).to.deep.equal({
      cordon: true,
      evictStuckPods: true,
      requireIoPressure: true,
      undoOnRecovery: true,
    });
    expect(result.spec.safety).to.deep.equal({
      maxUnhealthyNodes: '20%',
      minSchedulableNodes: 1,
      maxEvictionsPerMinute: 10,
      cooldownSeconds: 300,
      dryRun: false,
      paused: false,
    });
  });

  it('treats a missing spec as empty', () => {
    expect(validateSandboxPolicySpec(undefined).valid).to.equal(true);
  });

  const invalid: { name: string; spec: unknown; fields: string[] }[] = [
    { name: 'a non-object spec', spec: 'cordon please', fields: ['spec'] },
    {
      name: 'a zero threshold',
      spec: { detection: { stuckThresholdSeconds: 0 } },
      fields: ['spec.detection.stuckThresholdSeconds'],
    },
    {
      name: 'a fractional threshold',
      spec: { detection: { stuckThresholdSeconds: 1.5 } },
      fields: ['spec.detection.stuckThresholdSeconds'],
    },
    {
      name: 'an unknown source',
      spec: { ioPressure: { source: 'iostat' } },
      fields: ['spec.ioPressure.source'],
    },
    {
      name: 'a percent over 100',
      spec: { ioPressure: { thresholds: { diskBusyPercent: 101 } } },
      fields: ['spec.ioPressure.thresholds.diskBusyPercent'],
    },
    {
      name: 'maxUnhealthyNodes 150%',
      spec: { safety: { maxUnhealthyNodes: '150%' } },
      fields: ['spec.safety.maxUnhealthyNodes'],
    },
    {
      name: 'maxUnhealthyNodes -1',
      spec: { safety: { maxUnhealthyNodes: -1 } },
      fields: ['spec.safety.maxUnhealthyNodes'],
    },
    {
      name: 'prometheus source without settings',
      spec: { ioPressure: { source: 'prometheus' } },
      fields: ['spec.ioPressure.prometheus'],
    },
    {
      name: 'a prometheus URL of another scheme',
      spec: { ioPressure: { source: 'prometheus', prometheus: { url: 'ftp://x' } } },
      fields: ['spec.ioPressure.prometheus.url'],
    },
    {
      name: 'a prometheus URL that is not one',
      spec: { ioPressure: { source: 'prometheus', prometheus: { url: 'not a url' } } },
      fields: ['spec.ioPressure.prometheus.url'],
    },
    {
      name: 'a node label regex without a group',
      spec: {
        ioPressure: { source: 'prometheus', prometheus: { url: 'http://p:9090', nodeLabelRegex: '.*' } },
      },
      fields: ['spec.ioPressure.prometheus.nodeLabelRegex'],
    },
    {
      name: 'a broken node label regex',
      spec: {
        ioPressure: { source: 'prometheus', prometheus: { url: 'http://p:9090', nodeLabelRegex: '(' } },
      },
      fields: ['spec.ioPressure.prometheus.nodeLabelRegex'],
    },
    {
      name: 'a node condition that is not about IO',
      spec: { ioPressure: { source: 'nodeCondition', nodeCondition: { type: 'Ready' } } },
      fields: ['spec.ioPressure.nodeCondition.type'],
    },
    {
      name: 'readings that expire before pressure can be sustained',
      spec: { ioPressure: { sustainSeconds: 600, staleAfterSeconds: 60 } },
      fields: ['spec.ioPressure.staleAfterSeconds'],
    },
    {
      name: 'a bad taint key',
      spec: { remediation: { taint: { key: 'bad key!' } } },
      fields: ['spec.remediation.taint.key'],
    },
    {
      name: 'a bad taint value',
      spec: { remediation: { taint: { value: '-x-' } } },
      fields: ['spec.remediation.taint.value'],
    },
    {
      name: 'an empty migration selector',
      spec: { remediation: { migrateWorkloads: { podSelector: {} } } },
      fields: ['spec.remediation.migrateWorkloads.podSelector'],
    },
    {
      name: 'In without values in the node selector',
      spec: { nodeSelector: { matchExpressions: [{ key: 'zone', operator: 'In' }] } },
      fields: ['spec.nodeSelector.matchExpressions[0].values'],
    },
    {
      name: 'an unknown operator',
      spec: { nodeSelector: { matchExpressions: [{ key: 'zone', operator: 'Gt', values: ['1'] }] } },
      fields: ['spec.nodeSelector.matchExpressions[0].operator'],
    },
  ];
  for (const { name, spec, fields } of invalid) {
    it(`refuses ${name}, naming ${fields.join(', ')}`, () => {
      const result = validateSandboxPolicySpec(spec);
      expect(result.valid).to.equal(false);
      expect(fieldsOf(spec)).to.deep.equal(fields);
      for (const problem of result.problems) expect(problem.message).to.be.a('string').and.not.equal('');
    });
  }

  it('lists every problem at once, across sections, schema and cross-field alike', () => {
    const spec = {
      detection: { stuckThresholdSeconds: -1, minStuckPods: 0 },
      ioPressure: { source: 'prometheus' },
      remediation: { migrateWorkloads: { podSelector: {} } },
      safety: { maxUnhealthyNodes: '150%', maxEvictionsPerMinute: -3 },
    };
    expect(fieldsOf(spec)).to.have.members([
      'spec.detection.stuckThresholdSeconds',
      'spec.detection.minStuckPods',
      'spec.safety.maxUnhealthyNodes',
      'spec.safety.maxEvictionsPerMinute',
      'spec.ioPressure.prometheus',
      'spec.remediation.migrateWorkloads.podSelector',
    ]);
  });

  it('never throws, whatever it is given', () => {
    fc.assert(
      fc.property(fc.anything(), (raw) => {
        const result = validateSandboxPolicySpec(raw);
        expect(result.valid || result.problems.length > 0).to.equal(true);
      }),
      { numRuns: 1000 },
    );
  });
});

describe('selectorProblems', () => {
  it('checks label keys and values and operator arity', () => {
    const problems = selectorProblems(
      {
        matchLabels: { 'bad key': 'ok', good: 'bad value!' },
        matchExpressions: [
          { key: 'a', operator: 'Exists', values: ['x'] },
          { key: 'b', operator: 'In', values: ['-bad-'] },
        ],
      },
      'sel',
    );
    expect(problems.map((p) => p.field)).to.deep.equal([
      'sel.matchLabels',
      'sel.matchLabels.good',
      'sel.matchExpressions[0].values',
      'sel.matchExpressions[1].values[0]',
    ]);
  });
});

describe('names and values', () => {
  it('accepts qualified names and refuses malformed ones', () => {
    expect(qualifiedNameProblem('sandbox.remediator.io/exclude')).to.equal(undefined);
    expect(qualifiedNameProblem('node-role.kubernetes.io/control-plane')).to.equal(undefined);
    expect(qualifiedNameProblem('/x')).to.match(/prefix/);
    expect(qualifiedNameProblem('UPPER.case/x')).to.match(/prefix/);
    expect(qualifiedNameProblem('a/')).to.match(/name part/);
    expect(qualifiedNameProblem('x'.repeat(64))).to.match(/name part/);
    expect(labelValueProblem('')).to.equal(undefined);
    expect(labelValueProblem('x'.repeat(64))).to.be.a('string');
  });

  it('resolves int-or-percent against a total, rounding percentages down', () => {
    expect(resolveIntOrPercent(3, 10)).to.equal(3);
    expect(resolveIntOrPercent('20%', 10)).to.equal(2);
    expect(resolveIntOrPercent('20%', 4)).to.equal(0);
    expect(resolveIntOrPercent('100%', 7)).to.equal(7);
  });
});

describe('unknown fields', () => {
  it('names each unknown field (the apiserver prunes them; offline validation reports them)', () => {
    expect(validateSandboxPolicySpec({ remediation: { rebootNode: true, drain: 1 } }).problems).to.deep.equal(
      [
        { field: 'spec.remediation.rebootNode', message: 'unknown field' },
        { field: 'spec.remediation.drain', message: 'unknown field' },
      ],
    );
  });
});
