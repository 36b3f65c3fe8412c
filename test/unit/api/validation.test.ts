import { expect } from 'chai';
import fc from 'fast-check';
import {
  labelValueProblem,
  LimitIoSchema,
  qualifiedNameProblem,
  resolveIntOrPercent,
  type IntOrPercent,
  selectorProblems,
  validateSandboxPolicySpec,
} from '../../../src/api/v1alpha1/index.js';

const fieldsOf = (raw: unknown) => validateSandboxPolicySpec(raw).problems.map((p) => p.field);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
/** Deep merge of plain objects; b wins where they disagree. */
function merged(a: unknown, b: unknown): unknown {
  if (!isObject(a) || !isObject(b)) return b;
  const out: Record<string, unknown> = { ...a };
  for (const [key, value] of Object.entries(b)) out[key] = key in a ? merged(a[key], value) : value;
  return out;
}

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
      nodeCondition: true,
    });
    expect(result.spec.safety).to.deep.equal({
      maxUnhealthyNodes: '20%',
      minSchedulableNodes: 1,
      maxEvictionsPerMinute: 10,
      cooldownSeconds: 300,
      dryRun: false,
      paused: false,
      nodeLease: false,
    });
  });

  it('fills the defaults of limitIo, and takes a policy with it', () => {
    const result = validateSandboxPolicySpec({ remediation: { limitIo: {} } });
    expect(result.valid, JSON.stringify(result)).to.equal(true);
    expect(LimitIoSchema.parse({})).to.deep.equal({
      minSharePercent: 25,
      startPercent: 50,
      stepPercent: 50,
      floor: { bytesPerSecond: 1_048_576, opsPerSecond: 50, percent: 10 },
      sustainSeconds: 30,
      recoverySeconds: 60,
      podPsiPercent: 10,
      cooldownSeconds: 300,
      maxLimitSeconds: 3_600,
      maxLimitsPerMinute: 10,
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
      name: 'a series selector that is not label matchers (PromQL of its own)',
      spec: {
        ioPressure: {
          source: 'prometheus',
          prometheus: { url: 'http://p:9090', seriesSelector: '{job="node"} or vector(100)' },
        },
      },
      fields: ['spec.ioPressure.prometheus.seriesSelector'],
    },
    {
      name: 'a credential from both a file and a Secret, and one from neither',
      spec: {
        ioPressure: {
          source: 'prometheus',
          prometheus: {
            url: 'https://p:9090',
            ca: { file: '/ca.pem', secret: { name: 's', key: 'ca.crt' } },
            bearerToken: {},
          },
        },
      },
      fields: ['spec.ioPressure.prometheus.ca', 'spec.ioPressure.prometheus.bearerToken'],
    },
    {
      name: 'a bearer token for a url that is not https (sent in clear text)',
      spec: {
        ioPressure: {
          source: 'prometheus',
          prometheus: { url: 'http://p:9090', bearerToken: { file: '/token' } },
        },
      },
      fields: ['spec.ioPressure.prometheus.bearerToken'],
    },
    {
      name: 'a CA for a url that is not https',
      spec: {
        ioPressure: { source: 'prometheus', prometheus: { url: 'http://p:9090', ca: { file: '/ca.pem' } } },
      },
      fields: ['spec.ioPressure.prometheus.ca'],
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
      name: 'a taint key outside sandbox.remediator.io/, which the admission policy refuses the operator',
      spec: { remediation: { taint: { key: 'dedicated' } } },
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
      name: 'a limitIo floor over its first limit',
      spec: { remediation: { limitIo: { startPercent: 20, floor: { percent: 30 } } } },
      fields: ['spec.remediation.limitIo.floor.percent'],
    },
    {
      name: 'a limitIo step of 100% (no step at all)',
      spec: { remediation: { limitIo: { stepPercent: 100 } } },
      fields: ['spec.remediation.limitIo.stepPercent'],
    },
    {
      name: 'a limitIo floor under 64 KiB/s',
      spec: { remediation: { limitIo: { floor: { bytesPerSecond: 4096 } } } },
      fields: ['spec.remediation.limitIo.floor.bytesPerSecond'],
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

  it('lists all five problems of issue 24, schema ones first, the empty selector beside a broken taint', () => {
    const spec = {
      detection: { stuckThresholdSeconds: -30 },
      ioPressure: { source: 'prometheus', prometheus: {} },
      remediation: {
        taint: { key: 'sandbox.remediator.io/io-pressure', effect: 'NoExecute' },
        migrateWorkloads: { podSelector: {} },
      },
      safety: { maxUnhealthyNodes: '150%' },
    };
    expect(fieldsOf(spec)).to.deep.equal([
      'spec.detection.stuckThresholdSeconds',
      'spec.ioPressure.prometheus.url',
      'spec.remediation.taint.effect',
      'spec.safety.maxUnhealthyNodes',
      'spec.remediation.migrateWorkloads.podSelector',
    ]);
  });

  const besideSiblings: { name: string; spec: unknown; fields: string[] }[] = [
    {
      name: 'a NoExecute taint beside an empty migration selector',
      spec: { remediation: { taint: { effect: 'NoExecute' }, migrateWorkloads: { podSelector: {} } } },
      fields: ['spec.remediation.taint.effect', 'spec.remediation.migrateWorkloads.podSelector'],
    },
    {
      name: 'a NoExecute taint beside a bad taint key',
      spec: { remediation: { taint: { key: 'bad key!', effect: 'NoExecute' } } },
      fields: ['spec.remediation.taint.effect', 'spec.remediation.taint.key'],
    },
    {
      name: 'a zero maxPodsPerNode beside an empty migration selector',
      spec: { remediation: { migrateWorkloads: { podSelector: {}, maxPodsPerNode: 0 } } },
      fields: [
        'spec.remediation.migrateWorkloads.maxPodsPerNode',
        'spec.remediation.migrateWorkloads.podSelector',
      ],
    },
    {
      name: 'an empty prometheus nodeLabel beside a URL of another scheme',
      spec: { ioPressure: { source: 'prometheus', prometheus: { url: 'ftp://x', nodeLabel: '' } } },
      fields: ['spec.ioPressure.prometheus.nodeLabel', 'spec.ioPressure.prometheus.url'],
    },
    {
      name: 'a percent over 100 beside a node condition that is not about IO',
      spec: {
        ioPressure: {
          source: 'nodeCondition',
          nodeCondition: { type: 'Ready' },
          thresholds: { diskBusyPercent: 101 },
        },
      },
      fields: ['spec.ioPressure.thresholds.diskBusyPercent', 'spec.ioPressure.nodeCondition.type'],
    },
    {
      name: 'a negative recoverySeconds beside readings that expire too soon',
      spec: { ioPressure: { recoverySeconds: -1, sustainSeconds: 600, staleAfterSeconds: 60 } },
      fields: ['spec.ioPressure.recoverySeconds', 'spec.ioPressure.staleAfterSeconds'],
    },
    {
      name: 'an unknown operator beside a bad label key in the node selector',
      spec: {
        nodeSelector: {
          matchLabels: { 'bad key!': 'x' },
          matchExpressions: [{ key: 'zone', operator: 'Gt', values: ['1'] }],
        },
      },
      fields: ['spec.nodeSelector.matchExpressions[0].operator', 'spec.nodeSelector.matchLabels'],
    },
  ];
  for (const { name, spec, fields } of besideSiblings) {
    it(`does not let a nested problem hide its sibling's: ${name}`, () => {
      expect(fieldsOf(spec)).to.deep.equal(fields);
    });
  }

  // Dropping a broken field leaves a default or a hole behind; a rule that looked at it would judge that, not the user.
  const notTwiceNorMadeUp: { name: string; spec: unknown; fields: string[] }[] = [
    {
      name: 'a prometheus source whose settings lack a URL (not also "prometheus is required")',
      spec: { ioPressure: { source: 'prometheus', prometheus: {} } },
      fields: ['spec.ioPressure.prometheus.url'],
    },
    {
      name: 'a migration selector whose only label is a number (not also "must not be empty")',
      spec: { remediation: { migrateWorkloads: { podSelector: { matchLabels: { tier: 1 } } } } },
      fields: ['spec.remediation.migrateWorkloads.podSelector.matchLabels.tier'],
    },
    {
      name: 'a pacing selector whose only expression is broken (not also "must not be empty")',
      spec: {
        remediation: {
          throttleRollouts: {
            pacePodStarts: { namespaceSelector: { matchExpressions: [{ key: 'a', operator: 'Gt' }] } },
          },
        },
      },
      fields: [
        'spec.remediation.throttleRollouts.pacePodStarts.namespaceSelector.matchExpressions[0].operator',
      ],
    },
    {
      name: 'a sustainSeconds over its maximum (staleAfterSeconds not judged against the default)',
      spec: { ioPressure: { sustainSeconds: 5000, staleAfterSeconds: 10 } },
      fields: ['spec.ioPressure.sustainSeconds'],
    },
  ];
  for (const { name, spec, fields } of notTwiceNorMadeUp) {
    it(`reports only what the user wrote for ${name}`, () => {
      expect(fieldsOf(spec)).to.deep.equal(fields);
    });
  }

  it('lists the union of independent problems, schema ones first, wherever they sit', () => {
    // Each breaks one field its own way; none reads a field another one breaks.
    const schema = [
      { spec: { detection: { stuckThresholdSeconds: -30 } }, field: 'spec.detection.stuckThresholdSeconds' },
      { spec: { detection: { minStuckPods: 0 } }, field: 'spec.detection.minStuckPods' },
      {
        spec: { ioPressure: { thresholds: { diskBusyPercent: 101 } } },
        field: 'spec.ioPressure.thresholds.diskBusyPercent',
      },
      { spec: { ioPressure: { recoverySeconds: -1 } }, field: 'spec.ioPressure.recoverySeconds' },
      { spec: { remediation: { taint: { effect: 'NoExecute' } } }, field: 'spec.remediation.taint.effect' },
      {
        spec: { remediation: { throttleRollouts: { maxConcurrentRollouts: 0 } } },
        field: 'spec.remediation.throttleRollouts.maxConcurrentRollouts',
      },
      { spec: { remediation: { rebootNode: true } }, field: 'spec.remediation.rebootNode' },
      { spec: { safety: { maxUnhealthyNodes: '150%' } }, field: 'spec.safety.maxUnhealthyNodes' },
      { spec: { drainNodes: true }, field: 'spec.drainNodes' },
      {
        spec: { nodeSelector: { matchExpressions: [{ key: 'zone', operator: 'Gt' }] } },
        field: 'spec.nodeSelector.matchExpressions[0].operator',
      },
    ];
    const crossField = [
      {
        spec: { ioPressure: { source: 'prometheus', prometheus: { url: 'ftp://x' } } },
        field: 'spec.ioPressure.prometheus.url',
      },
      {
        spec: { ioPressure: { sustainSeconds: 600, staleAfterSeconds: 60 } },
        field: 'spec.ioPressure.staleAfterSeconds',
      },
      { spec: { remediation: { taint: { key: 'bad key!' } } }, field: 'spec.remediation.taint.key' },
      {
        spec: { remediation: { migrateWorkloads: { podSelector: {} } } },
        field: 'spec.remediation.migrateWorkloads.podSelector',
      },
      {
        spec: {
          remediation: { throttleRollouts: { namespaceSelector: { matchLabels: { 'bad key!': 'x' } } } },
        },
        field: 'spec.remediation.throttleRollouts.namespaceSelector.matchLabels',
      },
      {
        spec: { nodeSelector: { matchLabels: { 'bad key!': 'x' } } },
        field: 'spec.nodeSelector.matchLabels',
      },
    ];
    for (const { spec, field } of [...schema, ...crossField]) expect(fieldsOf(spec)).to.deep.equal([field]);
    fc.assert(
      fc.property(fc.subarray(schema), fc.subarray(crossField), (broken, related) => {
        const spec = [...broken, ...related].reduce<unknown>((acc, { spec }) => merged(acc, spec), {});
        const fields = fieldsOf(spec);
        const expected = broken.map((b) => b.field);
        expect(fields.slice(0, broken.length)).to.have.members(expected);
        expect(fields.slice(broken.length)).to.have.members(related.map((r) => r.field));
      }),
      { numRuns: 300 },
    );
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

  it('resolves int-or-percent against a total, rounding percentages down but allowing one node above 0%', () => {
    const rows: [IntOrPercent, number, number][] = [
      [3, 10, 3],
      [0, 10, 0],
      ['20%', 10, 2],
      ['29%', 10, 2],
      ['20%', 4, 1], // one degraded node of four is not a storm
      ['1%', 1, 1],
      ['20%', 0, 0],
      ['0%', 4, 0],
      ['0%', 1000, 0],
      ['100%', 7, 7],
    ];
    for (const [value, total, expected] of rows)
      expect(resolveIntOrPercent(value, total), `${value} of ${total}`).to.equal(expected);
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
