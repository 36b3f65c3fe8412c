import { Ajv } from 'ajv';
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import {
  buildCustomResourceDefinition,
  GROUP,
  RESOURCE_KINDS,
  SandboxHealthSpecSchema,
  toStructuralSchema,
  validateSandboxPolicySpec,
  type JsonSchema,
} from '../../../src/api/v1alpha1/index.js';
import { readManifests, REPO_ROOT } from '../../support/manifests.js';

type Crd = { spec: { names: { kind: string }; versions: { schema: { openAPIV3Schema: JsonSchema } }[] } };

const committed = (plural: string) =>
  parse(readFileSync(join(REPO_ROOT, 'crds', `${plural}.${GROUP}.yaml`), 'utf8')) as Crd;
const rootSchema = (crd: Crd) => crd.spec.versions[0]!.schema.openAPIV3Schema;

/** Every problem that makes a schema non-structural in the apiserver's sense, with its path. */
function structuralProblems(node: JsonSchema, path: string, inProperties = true): string[] {
  const problems: string[] = [];
  if ('$ref' in node) problems.push(`${path}: $ref`);
  if ('propertyNames' in node) problems.push(`${path}: propertyNames`);
  const intOrString = node['x-kubernetes-int-or-string'] === true;
  if (!intOrString && typeof node.type !== 'string') problems.push(`${path}: no type`);
  if (intOrString && JSON.stringify(node.anyOf) !== '[{"type":"integer"},{"type":"string"}]') {
    problems.push(`${path}: int-or-string anyOf must be exactly integer|string`);
  }
  if (!intOrString && ('anyOf' in node || 'oneOf' in node || 'allOf' in node))
    problems.push(`${path}: union`);
  if (inProperties && path !== '' && !path.endsWith('.metadata') && !/\.(apiVersion|kind)$/.test(path)) {
    if (typeof node.description !== 'string' || node.description.length === 0)
      problems.push(`${path}: no description`);
  }
  for (const [name, child] of Object.entries((node.properties ?? {}) as Record<string, JsonSchema>)) {
    problems.push(...structuralProblems(child, `${path}.${name}`));
  }
  if (node.items) problems.push(...structuralProblems(node.items as JsonSchema, `${path}[]`, false));
  if (typeof node.additionalProperties === 'object') {
    problems.push(...structuralProblems(node.additionalProperties as JsonSchema, `${path}{}`, false));
  }
  return problems;
}

describe('generated CRDs', () => {
  for (const kind of RESOURCE_KINDS) {
    describe(kind.kind, () => {
      const crd = buildCustomResourceDefinition(kind) as Crd;

      it('is committed exactly as generated (make manifests)', () => {
        expect(stringify(committed(kind.plural))).to.equal(stringify(crd));
      });

      it('has a structural schema: every node typed, no $ref, no unions, every field described', () => {
        expect(structuralProblems(rootSchema(crd), '')).to.deep.equal([]);
      });
    });
  }

  it('puts the int-or-percent checks beside the anyOf', () => {
    const safety = (
      rootSchema(buildCustomResourceDefinition(RESOURCE_KINDS[0]) as Crd).properties as Record<
        string,
        JsonSchema
      >
    ).spec!;
    const field = (
      (safety.properties as Record<string, JsonSchema>).safety!.properties as Record<string, JsonSchema>
    ).maxUnhealthyNodes!;
    expect(field).to.include({ minimum: 0, default: '20%', 'x-kubernetes-int-or-string': true });
    expect(field.pattern).to.be.a('string');
  });

  it('refuses unions that Kubernetes cannot represent', () => {
    expect(() => toStructuralSchema({ anyOf: [{ type: 'string' }, { type: 'boolean' }] })).to.throw(
      /not structural/,
    );
    expect(() => toStructuralSchema('string')).to.throw(/expected a schema object/);
  });
});

describe('samples', () => {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  const validators = new Map(
    RESOURCE_KINDS.map((kind) => [kind.kind, ajv.compile(rootSchema(committed(kind.plural)))]),
  );
  const samples = readManifests('config/samples');

  it('exist for both kinds', () => {
    expect(new Set(samples.map((s) => s.object.kind))).to.deep.equal(
      new Set(['SandboxPolicy', 'SandboxHealth']),
    );
  });

  for (const { file, object } of samples) {
    it(`${file} validates against the generated schema and the zod schema`, () => {
      const validate = validators.get(object.kind)!;
      expect(validate(object), JSON.stringify(validate.errors)).to.equal(true);
      if (object.kind === 'SandboxPolicy') {
        expect(validateSandboxPolicySpec(object.spec).problems).to.deep.equal([]);
      } else {
        expect(SandboxHealthSpecSchema.safeParse(object.spec).success).to.equal(true);
      }
    });
  }

  describe('invalid fixtures', () => {
    const policySchema = validators.get('SandboxPolicy')!;
    const byName = new Map(
      readManifests('test/fixtures/invalid-policies').map((m) => [m.object.metadata.name, m.object]),
    );
    const problemsOf = (name: string) => validateSandboxPolicySpec(byName.get(name)!.spec).problems;

    it('refuses a negative threshold in both schemas, naming the field', () => {
      expect(policySchema(byName.get('invalid-negative-threshold'))).to.equal(false);
      expect(problemsOf('invalid-negative-threshold').map((p) => p.field)).to.deep.equal([
        'spec.detection.stuckThresholdSeconds',
      ]);
    });

    it('refuses maxUnhealthyNodes over 100% in both schemas', () => {
      expect(policySchema(byName.get('invalid-storm-limit'))).to.equal(false);
      expect(problemsOf('invalid-storm-limit').map((p) => p.field)).to.include(
        'spec.safety.maxUnhealthyNodes',
      );
    });

    it('accepts the cross-field fixture in the schema but lists every problem in validation', () => {
      expect(policySchema(byName.get('invalid-cross-field'))).to.equal(true);
      expect(problemsOf('invalid-cross-field').map((p) => p.field)).to.deep.equal([
        'spec.ioPressure.prometheus',
        'spec.remediation.migrateWorkloads.podSelector',
      ]);
    });
  });
});
