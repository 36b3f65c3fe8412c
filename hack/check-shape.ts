// The size budget of src/ (issue 24): no file over 400 lines, no function over 100, measured on the TypeScript AST
// (a function from its first token to its last, arrow functions and methods included). Run by `make verify`; names
// every file and function over its budget and exits 1, so a god object cannot grow back unnoticed.
//
//   npx tsx hack/check-shape.ts [--files 400] [--functions 100] [DIR]
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const FILE_BUDGET = arg('--files', 400);
const FUNCTION_BUDGET = arg('--functions', 100);
const root =
  process.argv.slice(2).find((a, i, all) => !a.startsWith('--') && !all[i - 1]?.startsWith('--')) ?? 'src';

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** What a function is called where it is defined: its own name, the variable or property it is assigned to. */
function nameOf(node: ts.FunctionLikeDeclaration): string {
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  if (node.name) return node.name.getText();
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent))
    return parent.name.getText();
  return '(anonymous)';
}

const over: string[] = [];
for (const file of sources(root)) {
  const text = readFileSync(file, 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const lineOf = (position: number) => source.getLineAndCharacterOfPosition(position).line + 1;
  const lines = text.endsWith('\n') ? lineOf(text.length) - 1 : lineOf(text.length);
  const name = relative('.', file);
  if (lines > FILE_BUDGET) over.push(`${name}: ${lines} lines (budget ${FILE_BUDGET})`);
  const visit = (node: ts.Node, owner: string): void => {
    const inner = ts.isClassDeclaration(node) && node.name ? node.name.text : owner;
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const length = lineOf(node.getEnd()) - lineOf(node.getStart()) + 1;
      const fn = nameOf(node);
      if (length > FUNCTION_BUDGET)
        over.push(
          `${name}:${lineOf(node.getStart())}: ${owner ? `${owner}.` : ''}${fn} is ${length} lines (budget ${FUNCTION_BUDGET})`,
        );
    }
    ts.forEachChild(node, (child) => {
      visit(child, inner);
    });
  };
  visit(source, '');
}
if (over.length > 0) {
  console.error(
    `Over the size budget of ${root}/ (split by concern; see docs/adr/0016):\n  ${over.join('\n  ')}`,
  );
  process.exit(1);
}
