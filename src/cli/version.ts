// The version `--version` reports: the release's, written by `make version` (hack/release/versions.ts), which
// `make verify` checks against package.json, the image and the chart. Do not edit by hand.
export const VERSION = '0.2.0';
