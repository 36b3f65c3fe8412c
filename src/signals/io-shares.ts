// PURE: the one rule of who does a device's IO, for every source that attributes it (the agent's cgroup reads,
// Prometheus' cAdvisor series, the kubelet's pod PSI): a consumer's share, the shares adding up to 100, and the
// role a share or a pressure gives (docs/adr/0018-io-attribution.md).
import type { IoRole } from '../api/v1alpha1/index.js';

/** A pod with this share of the saturated device's bytes or operations is a Culprit (the agent's flag's default). */
export const CULPRIT_SHARE_PERCENT = 25;
/** A pod whose own IO pressure (some avg10) is this or more, with a smaller share, is a Victim. */
export const VICTIM_PSI_PERCENT = 20;

export interface RoleThresholds {
  culpritSharePercent: number;
  victimPsiPercent: number;
}

export const DEFAULT_THRESHOLDS: RoleThresholds = {
  culpritSharePercent: CULPRIT_SHARE_PERCENT,
  victimPsiPercent: VICTIM_PSI_PERCENT,
};

/**
 * Roles, like the reading's bands, are left only past an exit under the threshold that entered them: a pod at
 * 24-26 % would otherwise turn Culprit and back on every sample, and each turn is a write.
 */
const CULPRIT_EXIT = 0.8;
const VICTIM_EXIT = 0.7;

/** IO over an interval, per second: bytes and, where the source counts them, operations. */
export interface IoRate {
  bytes: number;
  ops?: number;
}

/**
 * A consumer's share of the device in percent: the larger of its share of the bytes and of the operations, so
 * that many small writes (a database's fsyncs) weigh as much as a few large ones.
 */
export function shareOf(consumer: IoRate, device: IoRate): number {
  const byBytes = device.bytes > 0 ? (consumer.bytes / device.bytes) * 100 : 0;
  const byOps = device.ops && consumer.ops !== undefined ? (consumer.ops / device.ops) * 100 : 0;
  return Math.max(byBytes, byOps);
}

/**
 * Shares scaled down to sum to 100 at most: the consumers' counters and the device's are read at other moments
 * (a cgroup counts bios as submitted, diskstats requests as completed after merging; Prometheus scrapes cAdvisor
 * and node_exporter apart), so their sum can exceed the device's.
 */
export function scaleShares(shares: readonly number[]): number[] {
  const total = shares.reduce((a, b) => a + Math.max(0, b), 0);
  const scale = total > 100 ? 100 / total : 1;
  return shares.map((s) => Math.max(0, s) * scale);
}

/**
 * Shares in tenths of a percent that add up to exactly 100.0, each as near its value as that allows (largest
 * remainder): rounding each on its own could make 99.9 or 100.1.
 */
export function splitHundred(values: readonly number[]): number[] {
  const tenths = values.map((v) => Math.max(0, v) * 10);
  const floors = tenths.map(Math.floor);
  let left = 1000 - floors.reduce((a, b) => a + b, 0);
  const order = tenths
    .map((t, i) => [t - Math.floor(t), i] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (const [, i] of order) {
    if (left <= 0) break;
    floors[i] = (floors[i] ?? 0) + 1;
    left--;
  }
  return floors.map((f) => f / 10);
}

/**
 * A pod's role from its published share and its own IO pressure; `was`, its role last published, gives the
 * hysteresis. A source without shares (the kubelet's Summary) passes 0; one without pressure, undefined.
 */
export function podRole(
  share: number,
  psi: number | undefined,
  was: IoRole | undefined,
  thresholds: RoleThresholds = DEFAULT_THRESHOLDS,
): IoRole {
  const culprit = thresholds.culpritSharePercent * (was === 'Culprit' ? CULPRIT_EXIT : 1);
  if (share >= culprit) return 'Culprit';
  const victim = thresholds.victimPsiPercent * (was === 'Victim' ? VICTIM_EXIT : 1);
  return psi !== undefined && psi >= victim ? 'Victim' : 'Bystander';
}
