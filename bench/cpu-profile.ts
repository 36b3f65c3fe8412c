// Reads a V8 CPU profile (node --cpu-prof) into where the time went: idle, garbage collection, and the functions
// with the most self time, over the whole profile or a span counted back from its end (the profile ends when the
// process exits, so a caller that knows when that was can name a span by wall-clock time).
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  windowMs: number;
  busyPercent: number;
  idleMs: number;
  gcMs: number;
  /** Self time by function (name file:line), most first. */
  top: { fn: string; selfMs: number }[];
}

/** The span `fromEndMs` to `toEndMs` before the profile's end; the whole profile without one. */
export function summarizeProfile(
  file: string,
  span?: { fromEndMs: number; toEndMs: number },
  topN = 12,
): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const from = span ? profile.endTime - span.fromEndMs * 1000 : profile.startTime;
  const to = span ? profile.endTime - span.toEndMs * 1000 : profile.endTime;
  const self = new Map<string, number>();
  let at = profile.startTime;
  let idle = 0;
  let gc = 0;
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    const delta = profile.timeDeltas[i + 1] ?? 0; // a sample's time runs to the next one
    if (at < from || at > to) continue;
    const frame = byId.get(profile.samples[i]!)?.callFrame;
    if (!frame) continue;
    total += delta;
    if (frame.functionName === '(idle)') {
      idle += delta;
      continue;
    }
    if (frame.functionName === '(garbage collector)') gc += delta;
    const key =
      `${frame.functionName || '(anonymous)'} ${frame.url ? `${basename(frame.url)}:${frame.lineNumber + 1}` : ''}`.trim();
    self.set(key, (self.get(key) ?? 0) + delta);
  }
  const ms = (us: number) => Math.round(us / 100) / 10;
  return {
    windowMs: ms(total),
    busyPercent: total > 0 ? Math.round(((total - idle) / total) * 1000) / 10 : 0,
    idleMs: ms(idle),
    gcMs: ms(gc),
    top: [...self]
      .sort((a, b) => b[1] - a[1])
      .slice(0, topN)
      .map(([fn, us]) => ({ fn, selfMs: ms(us) })),
  };
}
