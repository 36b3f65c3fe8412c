// Reading raw API JSON (watch events, admission requests, lists as client-node deserialised them): guards that
// never throw, so a reader takes what is there and a default for what is not. Pure.

export type Json = Record<string, unknown>;
export const isJson = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
export const obj = (v: unknown): Json => (isJson(v) ? v : {});
export const arr = (v: unknown): Json[] => (Array.isArray(v) ? v.map(obj) : []);
export const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
export const num = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);
export const numOr = (v: unknown, fallback: number): number => num(v) ?? fallback;
export const labels = (v: unknown): Record<string, string> =>
  Object.fromEntries(Object.entries(obj(v)).filter((e): e is [string, string] => typeof e[1] === 'string'));

export function toDate(v: unknown): Date | undefined {
  if (v instanceof Date) return Number.isNaN(v.getTime()) ? undefined : v;
  if (typeof v !== 'string' || v === '') return undefined;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? undefined : d;
}
