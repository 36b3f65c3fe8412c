import { readFile } from 'node:fs/promises';
import { readStdin } from './process.js';
import { parseAllDocuments } from 'yaml';
import { API_VERSION, validateSandboxPolicySpec, type PolicyProblem } from '../api/v1alpha1/index.js';

export interface FileReport {
  source: string;
  name: string;
  problems: PolicyProblem[];
}

/** Validates every SandboxPolicy document in a YAML text exactly as the operator would. */
export function validatePolicyDocuments(text: string, source: string): FileReport[] {
  const reports: FileReport[] = [];
  parseAllDocuments(text).forEach((doc, index) => {
    const where = `${source}#${index}`;
    if (doc.errors.length > 0) {
      reports.push({
        source: where,
        name: '?',
        problems: doc.errors.map((e) => ({ field: '(yaml)', message: e.message })),
      });
      return;
    }
    const object = doc.toJS() as {
      apiVersion?: unknown;
      kind?: unknown;
      metadata?: { name?: unknown };
      spec?: unknown;
    } | null;
    if (object?.kind !== 'SandboxPolicy') return;
    const name = typeof object.metadata?.name === 'string' ? object.metadata.name : '?';
    const problems: PolicyProblem[] = [];
    if (object.apiVersion !== API_VERSION) {
      problems.push({ field: 'apiVersion', message: `must be ${API_VERSION}` });
    }
    problems.push(...validateSandboxPolicySpec(object.spec).problems);
    reports.push({ source: where, name, problems });
  });
  return reports;
}

export async function runValidate(files: string[]): Promise<number> {
  let failed = 0;
  for (const file of files) {
    const text = file === '-' ? await readStdin('SandboxPolicy YAML') : await readFile(file, 'utf8');
    const reports = validatePolicyDocuments(text, file);
    if (reports.length === 0) console.log(`${file}: no SandboxPolicy documents`);
    for (const report of reports) {
      if (report.problems.length === 0) {
        console.log(`${report.source} SandboxPolicy/${report.name}: valid`);
        continue;
      }
      failed++;
      console.log(`${report.source} SandboxPolicy/${report.name}: ${report.problems.length} problem(s)`);
      for (const problem of report.problems) console.log(`  ${problem.field}: ${problem.message}`);
    }
  }
  return failed > 0 ? 1 : 0;
}
