// 1,000 generated SandboxPolicies, most of them invalid, applied to the real apiserver with the operator running:
// each is refused by the CRD schema or reported Valid=False with its problems, the operator never exits, and no
// invalid policy acts on the saturated node they all select.
import { expect } from 'chai';
import fc from 'fast-check';
import https from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import { validateSandboxPolicySpec } from '../../src/api/v1alpha1/index.js';
import { auditEvents, fieldManagerOf, resourceOf, succeeded } from '../support/audit.js';
import {
  Cleanup,
  createNamespace,
  createNodes,
  eventually,
  kubeConfig,
  kubectl,
} from '../support/cluster.js';
import { useOperator } from '../support/operator-process.js';
import { FAST_IO } from '../support/proc-root.js';
import { applyPolicy, getPolicyStatus } from '../support/resources.js';
import { SaturatedNode } from '../support/saturated-node.js';
import { createSpreadDeployment, isRunning, podsOf, readNode } from '../support/workloads.js';

const GROUP = 'sandbox.remediator.io';
const COUNT = Number(process.env.POLICY_FUZZ_COUNT ?? 1000);
const SEED = Number(process.env.POLICY_FUZZ_SEED ?? Date.now() % 1_000_000);
const FUZZ_LABEL = 'sandbox.remediator.io/test-fuzz';
const log = (msg: string) => {
  console.error(`      [policy-fuzz] ${msg}`);
};

/** Every leaf of a spec with its defaults filled in, as a path: the places a user can get wrong. */
function leafPaths(value: unknown, prefix: string[] = []): string[][] {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [prefix];
  return Object.entries(value as Record<string, unknown>).flatMap(([k, v]) => leafPaths(v, [...prefix, k]));
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (next === null || typeof next !== 'object' || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[path.at(-1)!] = value;
}

/** An object without its null-valued fields, at every depth (array items are left as they are). */
function withoutNullFields(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNullFields);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [k, withoutNullFields(v)]),
  );
}

/** Values a user might put anywhere: wrong types, out of range, odd strings. */
const oddValue = fc.oneof(
  fc.constantFrom(-1, 0, 1, 59, 100, 101, 1e9, -0.5, 2.5, Number.MAX_SAFE_INTEGER),
  fc.constantFrom('', 'abc', '50%', '150%', '-5%', '10', 'true', 'NoExecute', 'http://[::1', 'ünïcödé'),
  fc.constantFrom(null, true, false, [], {}, [1, 2], { unknown: 1 }),
  fc.string({ maxLength: 40 }),
  fc.integer({ min: -1000, max: 1_000_000 }),
);

/** A policy spec: the full default spec with one to three fields set to something odd, or a field added. */
function specArbitrary(paths: string[][], base: Record<string, unknown>) {
  const mutation = fc.oneof(
    { weight: 6, arbitrary: fc.tuple(fc.constantFrom(...paths), oddValue) },
    {
      weight: 1,
      arbitrary: fc.tuple(
        fc.constantFrom(...paths).map((p) => [...p.slice(0, -1), 'unknownField']),
        // Not null: strict field validation refuses an unknown field whatever its value, so no null model applies.
        oddValue.filter((v) => v !== null),
      ),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(
        fc.constant<string[]>(['nodeSelector']),
        fc.oneof(
          fc.constant({ matchLabels: { 'bad key!': 'x' } }),
          fc.constant({ matchExpressions: [{ key: 'a', operator: 'In' }] }),
          fc.constant({ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] }),
          fc.constant({ matchLabels: { a: '-bad-' } }),
          fc.constant('all'),
        ),
      ),
    },
  );
  return fc.array(mutation, { minLength: 0, maxLength: 3 }).map((mutations) => {
    const spec = structuredClone(base);
    for (const [path, value] of mutations) setPath(spec, path, value);
    return { spec, surelyInvalid: mutations.some(([path]) => surelyInvalid(base, spec, path)) };
  });
}

function valueAt(target: unknown, path: string[]): unknown {
  return path.reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], target);
}

/**
 * Invalid whatever the operator's validation says, by the API's rules alone: an unknown field, a duration in
 * seconds that is not a whole number of at least 0, a switch that is not a boolean. (null is dropped and defaulted.)
 */
function surelyInvalid(base: unknown, spec: unknown, path: string[]): boolean {
  const value = valueAt(spec, path);
  if (value === null || value === undefined) return false;
  // Under matchLabels a new key is a label, which any valid label value makes valid (seed 191908 drew one).
  if (path.at(-1) === 'unknownField') return !path.includes('matchLabels');
  if (path.at(-1)?.endsWith('Seconds'))
    return typeof value !== 'number' || !Number.isInteger(value) || value < 0;
  return typeof valueAt(base, path) === 'boolean' && typeof value !== 'boolean';
}

describe('a fuzz of SandboxPolicies against the real apiserver, with the operator running', function () {
  const operator = useOperator();
  const cleanup = new Cleanup();
  after(async function () {
    this.timeout(120_000);
    await kubectl(['delete', 'sandboxpolicies', '-l', FUZZ_LABEL, '--wait=false']);
    await cleanup.run();
  });

  it(`refuses or reports every invalid one of ${COUNT}, never exits, and acts on nothing an invalid policy selects`, async function () {
    this.timeout(600_000);
    log(`seed ${SEED} (POLICY_FUZZ_SEED=${SEED} replays it)`);
    const namespace = await createNamespace(cleanup);
    const { pool, names } = await createNodes(cleanup, 3);
    const sick = new SaturatedNode(names[0]!, cleanup);
    await sick.start();
    await createSpreadDeployment(cleanup, namespace, 'web', pool, 6);
    await eventually('a stuck pod on the node', async () =>
      (await podsOf(namespace, 'web')).some((p) => p.spec?.nodeName === sick.name && !isRunning(p)),
    );
    await sick.pressure('load');
    const since = new Date();

    const sickPool = { matchLabels: { 'sandbox.remediator.io/test-pool': pool } };
    const nowhere = { matchLabels: { 'sandbox.remediator.io/test-pool': 'nowhere' } };
    const defaults = validateSandboxPolicySpec({ nodeSelector: sickPool });
    if (!defaults.valid) throw new Error('the default spec is invalid');
    // Fast clocks and room for one node (20% of 3 nodes is none), so a policy that slipped through would act
    // within the test, as the valid control at the end does.
    const base = {
      ...structuredClone(defaults.spec),
      detection: { stuckThresholdSeconds: 3, minStuckPods: 1 },
      ioPressure: { ...defaults.spec.ioPressure, ...FAST_IO },
      safety: { ...defaults.spec.safety, maxUnhealthyNodes: 1, cooldownSeconds: 5 },
    } as Record<string, unknown>;
    const generated = fc.sample(specArbitrary(leafPaths(base), base), { numRuns: COUNT, seed: SEED });
    const specs = generated.map((g) => g.spec);

    // A valid one goes nowhere and changes nothing; every invalid one selects the saturated node (or tries to).
    const policies = specs.map((spec, i) => {
      // Judged as the apiserver will store it: a null field is dropped and defaulted (no field is nullable).
      const valid = validateSandboxPolicySpec(withoutNullFields(spec));
      const name = `fuzz-${SEED}-${i}`;
      const body = valid.valid
        ? { ...spec, nodeSelector: nowhere, safety: { ...valid.spec.safety, dryRun: true } }
        : spec;
      return { name, body, problems: valid.valid ? [] : valid.problems };
    });
    const invalid = policies.filter((p) => p.problems.length > 0);
    log(`${invalid.length} of ${COUNT} invalid by the operator's own validation`);
    expect(invalid.length / COUNT, 'most are invalid').to.be.greaterThan(0.6);
    // The validation is not its own judge: what the API's rules alone call invalid, it must too.
    const missed = policies.filter((p, i) => generated[i]!.surelyInvalid && p.problems.length === 0);
    expect(
      missed.map((p) => JSON.stringify(p.body)),
      'invalid by construction, valid by validation',
    ).to.deep.equal([]);
    log(`${generated.filter((g) => g.surelyInvalid).length} invalid by construction, all found invalid`);

    // Created through the API with strict field validation, as kubectl does, eight at a time. (kubectl itself
    // validates a List on the client first and refuses all of it for one unknown field.)
    const kc = kubeConfig();
    const server = kc.getCurrentCluster()!.server;
    const started = Date.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < policies.length) {
          const p = policies[next++]!;
          const options: https.RequestOptions = {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
          };
          await kc.applyToHTTPSOptions(options);
          const url = new URL(`/apis/${GROUP}/v1alpha1/sandboxpolicies?fieldValidation=Strict`, server);
          const body = JSON.stringify({
            apiVersion: `${GROUP}/v1alpha1`,
            kind: 'SandboxPolicy',
            metadata: { name: p.name, labels: { [FUZZ_LABEL]: 'true' } },
            spec: p.body,
          });
          const code = await new Promise<number>((resolve, reject) => {
            const req = https.request(url, options, (res) => {
              res.resume();
              res.on('end', () => {
                resolve(res.statusCode ?? 0);
              });
            });
            req.on('error', reject);
            req.end(body);
          });
          if (code !== 201 && code !== 422 && code !== 400)
            throw new Error(`creating ${p.name}: HTTP ${code}`);
        }
      }),
    );
    const listed = await kubectl(['get', 'sandboxpolicies', '-l', FUZZ_LABEL, '-o', 'name']);
    const exists = new Set(listed.stdout.split('\n').map((line) => line.split('/')[1]));
    const accepted = policies.filter((p) => exists.has(p.name));
    const refused = policies.filter((p) => !exists.has(p.name));
    log(
      `created in ${Date.now() - started} ms: ${refused.length} refused by the CRD schema, ${accepted.length} accepted`,
    );
    const refusedButValid = refused.filter((p) => p.problems.length === 0).map((p) => JSON.stringify(p.body));
    expect(refusedButValid, 'the schema refuses only what validation refuses').to.deep.equal([]);

    // Every accepted one gets a status: Valid=False with every problem, or Valid=True.
    const pending = new Set(accepted.map((p) => p.name));
    await eventually(
      `a Valid condition on every accepted policy (${pending.size} left)`,
      async () => {
        const list = await kubectl(['get', 'sandboxpolicies', '-l', FUZZ_LABEL, '-o', 'json']);
        const items = (
          JSON.parse(list.stdout) as {
            items: {
              metadata: { name: string; generation: number };
              status?: { observedGeneration?: number; conditions?: { type: string; status: string }[] };
            }[];
          }
        ).items;
        for (const item of items)
          if (item.status?.conditions?.some((c) => c.type === 'Valid')) pending.delete(item.metadata.name);
        return pending.size === 0;
      },
      { timeoutMs: 180_000, intervalMs: 2000 },
    );
    // What the apiserver stored is what the operator judged: the same verdict as predicted above.
    const stored = new Map(
      (
        JSON.parse((await kubectl(['get', 'sandboxpolicies', '-l', FUZZ_LABEL, '-o', 'json'])).stdout) as {
          items: { metadata: { name: string }; spec: unknown }[];
        }
      ).items.map((item) => [item.metadata.name, item.spec]),
    );
    let reported = 0;
    for (const policy of accepted) {
      const judged = validateSandboxPolicySpec(stored.get(policy.name));
      expect(judged.valid, `${policy.name} as stored: ${JSON.stringify(stored.get(policy.name))}`).to.equal(
        policy.problems.length === 0,
      );
      const status = await getPolicyStatus(policy.name);
      const valid = status?.conditions?.find((c) => c.type === 'Valid');
      if (policy.problems.length === 0) {
        expect(valid?.status, policy.name).to.equal('True');
        continue;
      }
      expect(valid?.status, `${policy.name}: ${JSON.stringify(policy.body)}`).to.equal('False');
      expect(status?.problems, policy.name).to.deep.equal(judged.problems);
      reported++;
    }
    log(`${reported} accepted by the schema and reported Valid=False with their problems`);

    await sleep(5000); // past sustainSeconds: a policy that slipped through would have acted by now
    expect(operator.isRunning(), 'the operator never exited').to.equal(true);
    expect(
      operator.logs.filter((l) => l.level === 'raw'),
      'no stack trace or stray output',
    ).to.deep.equal([]);
    expect((await readNode(sick.name)).spec?.unschedulable, 'nothing cordoned').to.not.equal(true);
    const acted = (await auditEvents(since)).filter(
      (e) =>
        succeeded(e) &&
        ((resourceOf(e) === 'nodes' && fieldManagerOf(e) === 'sandbox-remediator') ||
          resourceOf(e) === 'pods/eviction'),
    );
    expect(
      acted.map((e) => `${e.verb} ${resourceOf(e)}/${e.objectRef?.name}`),
      'no cordon, no eviction',
    ).to.deep.equal([]);

    // The same node under a valid policy is remediated: what held the others back was their invalidity.
    await applyPolicy(cleanup, `fuzz-${SEED}-control`, { ...base, nodeSelector: sickPool });
    await eventually(
      'cordoned under a valid policy',
      async () => (await readNode(sick.name)).spec?.unschedulable === true,
      {
        timeoutMs: 60_000,
      },
    );
  });
});
