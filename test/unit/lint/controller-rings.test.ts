// The rings inside src/controllers/ as eslint enforces them: every folder may import the folders of the rings below
// its own and nothing above or beside it, and the root files import no folder. Each pair is linted with the import
// rule eslint.config.js configures for that file.
import { expect } from 'chai';
import { ESLint, Linter } from 'eslint';
import tseslint from 'typescript-eslint';
// @ts-expect-error the config is plain JavaScript, checked by its own @ts-check
import { CONTROLLER_RINGS } from '../../../eslint.config.js';

const rings = CONTROLLER_RINGS as string[][];
const eslint = new ESLint();
const linter = new Linter({ configType: 'flat' });

/** Whether eslint refuses `import` in a file at `path` (relative to the project), by the configured import rule. */
async function refuses(path: string, from: string): Promise<boolean> {
  const config = (await eslint.calculateConfigForFile(path)) as { rules: Record<string, Linter.RuleEntry> };
  const rule = config.rules['no-restricted-imports'];
  expect(rule, `no import rule for ${path}`).to.not.equal(undefined);
  // An error, not a warning: `eslint .` (make verify) fails on it.
  const level: unknown = Array.isArray(rule) ? rule[0] : rule;
  expect(level === 'error' || level === 2, `the import rule of ${path} is an error`).to.equal(true);
  const messages = linter.verify(
    `import { x } from '${from}';\nexport const y = x;\n`,
    [
      {
        files: ['**/*.ts'],
        languageOptions: { parser: tseslint.parser },
        rules: { 'no-restricted-imports': rule! },
      },
    ],
    path,
  );
  return messages.some((m) => m.ruleId === 'no-restricted-imports');
}

describe('lint: the rings of src/controllers', () => {
  const folders = rings.flat();
  const rank = (folder: string) => rings.findIndex((ring) => ring.includes(folder));

  it('names every folder of src/controllers once', async () => {
    const { readdirSync } = await import('node:fs');
    const present = readdirSync('src/controllers', { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
    expect([...folders].sort()).to.deep.equal(present.sort());
  });

  for (const folder of folders)
    it(`${folder} imports only the rings below its own`, async () => {
      const wrong: string[] = [];
      for (const other of folders) {
        if (other === folder) continue;
        const want = rank(other) <= rank(folder);
        const got = await refuses(`src/controllers/${folder}/x.ts`, `../${other}/y.js`);
        if (got !== want) wrong.push(`${other}: ${got ? 'refused' : 'allowed'}`);
      }
      expect(await refuses(`src/controllers/${folder}/x.ts`, '../failures.js')).to.equal(false);
      expect(await refuses(`src/controllers/${folder}/x.ts`, './z.js')).to.equal(false);
      expect(wrong).to.deep.equal([]);
    });

  it('the root files import no folder of src/controllers', async () => {
    for (const folder of folders)
      expect(await refuses('src/controllers/x.ts', `./${folder}/y.js`), folder).to.equal(true);
    expect(await refuses('src/controllers/x.ts', './failures.js')).to.equal(false);
  });
});
