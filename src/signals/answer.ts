import type { z } from 'zod';

// What every polled source does with an answer: parse it, and say briefly what was wrong with it. Reading it up to
// a bound is runtime/bounded-read.ts, shared with kube/ (the kubelet Summary fetcher).

/** JSON.parse, with undefined for what is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** The first problem zod found, and where: enough to say what was wrong without quoting a whole answer. */
export function firstIssue(error: z.ZodError): string {
  const [issue] = error.issues;
  if (!issue) return error.message;
  const more = error.issues.length > 1 ? ` (and ${error.issues.length - 1} more)` : '';
  return `${issue.path.join('.') || 'the answer'}: ${issue.message}${more}`;
}
