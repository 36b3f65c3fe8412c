// Where the pacing webhook is armed: the namespaces a pacing policy could gate now, and nothing while nothing is
// saturated; the CEL the apiserver evaluates; and the admin's own matchConditions kept beside ours.
import { expect } from 'chai';
import fc from 'fast-check';
import type { PacingPolicy } from '../../../src/policy/pacing.js';
import {
  ARMING_CONDITION,
  armingExpression,
  isArmedAs,
  MAX_ARMED_NAMESPACES,
  pacedNamespaces,
  withArming,
} from '../../../src/policy/webhook-arming.js';

const node = { name: 'n1', labels: {}, taints: [], unschedulable: false };
const policy = (over: Partial<PacingPolicy> = {}): PacingPolicy => ({
  name: 'p',
  namespaceSelector: { matchLabels: { pacing: 'on' } },
  gating: true,
  dryRun: false,
  saturated: [node],
  ...over,
});
const namespaces = [
  { name: 'web', labels: { pacing: 'on' } },
  { name: 'shop', labels: { pacing: 'on' } },
  { name: 'batch', labels: {} },
  { name: 'kube-system', labels: { pacing: 'on' } },
  { name: 'sandbox-remediator-system', labels: { pacing: 'on' } },
];

describe('pacedNamespaces', () => {
  const table: [string, PacingPolicy[], string[]][] = [
    ['a gating policy: its namespaces, sorted, never the system ones', [policy()], ['shop', 'web']],
    ['nothing saturated: none', [policy({ saturated: [] })], []],
    ['neither gating nor a dry run (paused without pressure): none', [policy({ gating: false })], []],
    ['a dry run counts, so it is armed', [policy({ gating: false, dryRun: true })], ['shop', 'web']],
    [
      'two policies: the union, once each',
      [policy(), policy({ name: 'q', namespaceSelector: { matchLabels: {} } })],
      ['batch', 'shop', 'web'],
    ],
    ['no policy: none', [], []],
  ];
  for (const [what, policies, want] of table)
    it(what, () => {
      expect(pacedNamespaces(policies, namespaces, 'sandbox-remediator-system')).to.deep.equal(want);
    });

  it('never names a namespace no arming policy selects (property)', () => {
    const label = fc.constantFrom('on', 'off');
    fc.assert(
      fc.property(
        fc.uniqueArray(
          fc.record({
            name: fc.oneof(fc.constant('kube-system'), fc.stringMatching(/^[a-z]{1,8}$/)),
            pacing: label,
          }),
          {
            selector: (n) => n.name,
            maxLength: 20,
          },
        ),
        fc.boolean(),
        fc.boolean(),
        (list, gating, saturated) => {
          const got = pacedNamespaces(
            [policy({ gating, saturated: saturated ? [node] : [] })],
            list.map((n) => ({ name: n.name, labels: { pacing: n.pacing } })),
            undefined,
          );
          const want =
            gating && saturated
              ? list
                  .filter((n) => n.pacing === 'on' && n.name !== 'kube-system')
                  .map((n) => n.name)
                  .sort()
              : [];
          expect(got).to.deep.equal(want);
        },
      ),
    );
  });
});

describe('armingExpression', () => {
  it('is false for none, a list for some, and true past the bound', () => {
    expect(armingExpression([])).to.equal('false');
    expect(armingExpression(['shop', 'web'])).to.equal("request.namespace in ['shop', 'web']");
    const many = Array.from({ length: MAX_ARMED_NAMESPACES + 1 }, (_, i) => `ns-${i}`);
    expect(armingExpression(many)).to.equal('true');
    expect(armingExpression(many.slice(1))).to.match(/^request\.namespace in \[/);
  });
});

describe('withArming', () => {
  const admins = { name: 'team.example/not-batch', expression: 'true' };
  it("sets ours where it stands, and keeps the admin's", () => {
    const ours = { name: ARMING_CONDITION, expression: 'false' };
    expect(withArming([ours, admins], "request.namespace in ['a']")).to.deep.equal([
      { name: ARMING_CONDITION, expression: "request.namespace in ['a']" },
      admins,
    ]);
    expect(withArming([admins], 'false'), 'added when missing').to.deep.equal([admins, ours]);
    expect(withArming(undefined, 'false')).to.deep.equal([ours]);
  });
  it('knows when ours already says so', () => {
    expect(isArmedAs([admins, { name: ARMING_CONDITION, expression: 'false' }], 'false')).to.equal(true);
    expect(isArmedAs([admins], 'false')).to.equal(false);
    expect(isArmedAs([{ name: ARMING_CONDITION, expression: 'true' }], 'false')).to.equal(false);
  });
});
