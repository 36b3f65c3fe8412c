export interface RuntimeAssessment {
  version: string;
  /** True when containerd lacks the read-only temp mount fix (PR 6478): < 1.5.10 on 1.5, < 1.6.0 otherwise. */
  predatesMountFix?: boolean;
  note?: string;
}

/** Parses containerRuntimeVersion (e.g. containerd://1.6.0) and says whether it predates the fixes. Pure. */
export function assessRuntimeVersion(version: string): RuntimeAssessment {
  const match = /^containerd:\/\/v?(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!match) {
    return {
      version,
      note: 'Not containerd, or an unrecognised version: the reservation fixes are containerd-specific.',
    };
  }
  const [major, minor, patch] = [Number(match[1]), Number(match[2]), Number(match[3])];
  const below = (m: number, n: number, p: number) =>
    major < m || (major === m && (minor < n || (minor === n && patch < p)));
  const predates = major === 1 && minor === 5 ? patch < 10 : below(1, 6, 0);
  if (predates) {
    return {
      version,
      predatesMountFix: true,
      note: 'Predates containerd 1.5.10/1.6.0 (read-only temp mounts, no syncfs on unmount): upgrade to reduce the IO containerd causes itself.',
    };
  }
  if ((major === 1 && minor === 6 && patch < 21) || (major === 1 && minor === 7 && patch < 1)) {
    return {
      version,
      predatesMountFix: false,
      note: 'Has the mount fix; 1.6.21 / 1.7.1 carry later fixes for this incident.',
    };
  }
  return { version, predatesMountFix: false };
}
