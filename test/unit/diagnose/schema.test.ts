import { Ajv2020 } from 'ajv/dist/2020.js';
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { diagnoseCluster } from '../../../src/diagnose/cluster.js';
import { diagnoseNode } from '../../../src/diagnose/node.js';
import { diagnosisJsonSchema, DiagnosisSchema } from '../../../src/diagnose/schema.js';
import { aNode, aPolicy, NOW, remediatingInput, remediatingStatus } from '../../support/diagnosis.js';
import { REPO_ROOT } from '../../support/manifests.js';

describe('the published diagnosis schema (schemas/diagnosis.schema.json)', () => {
  const committed = readFileSync(join(REPO_ROOT, 'schemas', 'diagnosis.schema.json'), 'utf8');
  // Formats are not checked: ajv-formats is not a dependency; the date-time pattern zod emits checks times anyway.
  const validate = new Ajv2020({ allErrors: true, strict: false, validateFormats: false }).compile(
    JSON.parse(committed) as object,
  );
  /** What `-o json` prints, read back as a script would. */
  const printed = (value: unknown): unknown => JSON.parse(JSON.stringify(value));

  // The bytes (prettier's formatting) are make verify's to check: prettier loaded here takes c8's measured coverage of
  // src/api and src/detection from 94% to 81% (in the same process; why, not found).
  it('is committed as generated from src/diagnose/schema.ts (make manifests)', () => {
    expect(JSON.parse(committed)).to.deep.equal(diagnosisJsonSchema());
  });

  const documents = {
    'a node under remediation': () => diagnoseNode(remediatingInput()),
    'a Node without a SandboxHealth': () =>
      diagnoseNode(
        remediatingInput((i) => {
          delete i.health;
          delete i.policy;
          i.node = aNode('n1', {}, false);
        }),
      ),
    'a node whose policy is invalid, with reads that failed': () =>
      diagnoseNode(
        remediatingInput((i) => {
          i.policy = aPolicy({ safety: { cooldownSeconds: -1 } }, { conditions: [] });
          i.unavailable = [{ what: 'list deployments', message: 'forbidden' }];
        }),
      ),
    'the cluster overview': () =>
      diagnoseCluster({
        now: NOW,
        healths: [{ name: 'n1', uid: 'u1', nodeName: 'n1', status: remediatingStatus() }],
        nodes: [aNode('n1'), aNode('n2')],
        policies: [aPolicy()],
        unavailable: [],
      }),
  };
  for (const [name, make] of Object.entries(documents)) {
    it(`validates the JSON of ${name}`, () => {
      const document = printed(make());
      expect(validate(document), JSON.stringify(validate.errors)).to.equal(true);
      expect(DiagnosisSchema.safeParse(document).success).to.equal(true);
    });
  }

  it('refuses a document that breaks it: a field missing, an unknown one, a time that is not RFC 3339', () => {
    const base = printed(diagnoseNode(remediatingInput())) as Record<string, unknown>;
    const broken = [
      { ...base, summary: undefined },
      { ...base, extra: 1 },
      { ...base, generatedAt: 'yesterday' },
      { ...base, kind: 'Other' },
    ].map((d) => printed(d));
    expect(broken.map((d) => validate(d))).to.deep.equal([false, false, false, false]);
  });
});
