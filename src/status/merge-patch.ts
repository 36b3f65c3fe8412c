// PURE: JSON merge patches (RFC 7386), as the apiserver applies them to status: objects merge key by key, null
// removes a key, anything else (arrays too) replaces. A patch of only the desired keys leaves a key the desired
// status dropped where it was, so the patch is made from the difference, with a null for each key dropped.
import { isDeepStrictEqual } from 'node:util';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** What the API stores for a value: no undefined fields (a JSON round trip). */
export function stored<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}

/**
 * The merge patch that turns `previous` into `desired` on the keys `owned` (top level; nested objects are ours
 * whole): changed keys set, keys the desired status dropped set to null. Keys not owned are left out, whatever
 * they hold. Empty when nothing differs.
 */
export function mergePatchFrom(previous: unknown, desired: Json, owned: readonly string[]): Json {
  const before = isObject(previous) ? previous : {};
  const after = stored(desired);
  const patch: Json = {};
  for (const key of owned) {
    const change = difference(before[key], after[key]);
    if (change !== undefined) patch[key] = change;
  }
  return patch;
}

/** The patch of one value; undefined when it is unchanged. */
function difference(before: unknown, after: unknown): unknown {
  if (after === undefined) return before === undefined ? undefined : null;
  if (!isObject(before) || !isObject(after)) return isDeepStrictEqual(before, after) ? undefined : after;
  const patch: Json = {};
  for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const change = difference(before[key], after[key]);
    if (change !== undefined) patch[key] = change;
  }
  return Object.keys(patch).length === 0 ? undefined : patch;
}

/** `target` with `patch` applied, as the apiserver would. */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return patch;
  const merged = new Map<string, unknown>(isObject(target) ? Object.entries(target) : []);
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) merged.delete(key);
    else merged.set(key, applyMergePatch(merged.get(key), value));
  }
  return Object.fromEntries(merged);
}
