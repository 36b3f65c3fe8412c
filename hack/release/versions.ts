// The one version of a release and where it is written: package.json (and its lock), the CLI's --version
// (src/cli/version.ts), the install commands of README.md and docs/install.md, and the image both config/ workloads name, from which hack/generate-chart.ts writes the
// chart's version, appVersion and default image. `make version VERSION=x.y.z` moves them all; `make verify` checks
// that they agree (hack/release/version.ts).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Where the release publishes the image (the release workflow pushes there; the chart's default pulls from it). */
export const IMAGE_REPOSITORY = 'ghcr.io/sandbox-remediator/sandbox-remediator';
/** Where the release pushes the chart, an OCI artifact: helm install NAME oci://.../sandbox-remediator --version. */
export const CHART_REPOSITORY = 'oci://ghcr.io/sandbox-remediator/charts';

/** The config/ files whose one `image:` line names the release's image. */
export const IMAGE_FILES = ['config/manager/manager.yaml', 'config/agent/daemonset.yaml'];
export const VERSION_FILE = 'src/cli/version.ts';
/** The documents whose install commands name the release: each `sandbox-remediator:X` and `--version X` in them. */
export const DOC_FILES = ['README.md', 'docs/install.md'];
const DOC_VERSION = /(sandbox-remediator:|--version )(\d+\.\d+\.\d+[0-9A-Za-z.-]*)/g;
const IMAGE_LINE = /^(\s*image:\s*)(\S+)(.*)$/m;
const VERSION_LINE = /^export const VERSION = '([^']*)';$/m;
const SEMVER = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;

export interface Found {
  file: string;
  /** What the file says the version is (for an image, its tag). */
  version: string | undefined;
  /** For an image line, the repository it names. */
  repository?: string;
}

const read = (root: string, file: string) => readFileSync(join(root, file), 'utf8');

/** Every place that carries the version, as it stands in the checkout at `root`. */
export function findVersions(root: string): Found[] {
  const pkg = JSON.parse(read(root, 'package.json')) as { version?: string };
  const lock = JSON.parse(read(root, 'package-lock.json')) as {
    version?: string;
    packages?: Record<string, { version?: string }>;
  };
  const found: Found[] = [
    { file: 'package.json', version: pkg.version },
    { file: 'package-lock.json', version: lock.version },
    { file: 'package-lock.json (packages[""])', version: lock.packages?.['']?.version },
    { file: VERSION_FILE, version: VERSION_LINE.exec(read(root, VERSION_FILE))?.[1] },
  ];
  for (const file of DOC_FILES)
    for (const [, , version] of read(root, file).matchAll(DOC_VERSION)) found.push({ file, version });
  for (const file of IMAGE_FILES) {
    const image = IMAGE_LINE.exec(read(root, file))?.[2] ?? '';
    const at = image.lastIndexOf(':');
    found.push({
      file,
      version: at > 0 ? image.slice(at + 1) : undefined,
      repository: at > 0 ? image.slice(0, at) : image,
    });
  }
  return found;
}

/** Every disagreement, each in a sentence; none when the release's version is one and its image the published one. */
export function versionProblems(found: readonly Found[]): string[] {
  const want = found[0]?.version;
  const problems: string[] = [];
  if (!want || !SEMVER.test(want)) problems.push(`package.json: version ${want ?? '(none)'} is not x.y.z`);
  for (const f of found.slice(1))
    if (f.version !== want)
      problems.push(`${f.file}: ${f.version ?? '(none)'}, not ${want} as package.json says`);
  for (const f of found)
    if (f.repository !== undefined && f.repository !== IMAGE_REPOSITORY)
      problems.push(
        `${f.file}: the image is ${f.repository}, not ${IMAGE_REPOSITORY} (where the release publishes)`,
      );
  return problems;
}

/** Writes `version` into every place that carries it (the chart is regenerated from these by the caller). */
export function setVersion(root: string, version: string): void {
  if (!SEMVER.test(version)) throw new Error(`${version} is not a version (x.y.z)`);
  const pkg = JSON.parse(read(root, 'package.json')) as Record<string, unknown>;
  writeFileSync(join(root, 'package.json'), `${JSON.stringify({ ...pkg, version }, null, 2)}\n`);
  const lock = JSON.parse(read(root, 'package-lock.json')) as {
    version?: string;
    packages: Record<string, { version?: string }>;
  };
  lock.version = version;
  if (lock.packages['']) lock.packages[''].version = version;
  writeFileSync(join(root, 'package-lock.json'), `${JSON.stringify(lock, null, 2)}\n`);
  const source = read(root, VERSION_FILE).replace(VERSION_LINE, `export const VERSION = '${version}';`);
  writeFileSync(join(root, VERSION_FILE), source);
  for (const file of DOC_FILES)
    writeFileSync(
      join(root, file),
      read(root, file).replace(DOC_VERSION, (_, before: string) => `${before}${version}`),
    );
  for (const file of IMAGE_FILES)
    writeFileSync(
      join(root, file),
      read(root, file).replace(IMAGE_LINE, (_, before: string, _image: string, after: string) =>
        [before, `${IMAGE_REPOSITORY}:${version}`, after].join(''),
      ),
    );
}
