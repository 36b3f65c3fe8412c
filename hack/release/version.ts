// The release's version (hack/release/versions.ts). Usage:
//   tsx hack/release/version.ts            print it and the image it names; exit 1 with every disagreement if any
//   tsx hack/release/version.ts --image    print the image alone (repository:tag), for the release workflow
//   tsx hack/release/version.ts --chart    print where the chart is pushed (an OCI repository), for the workflow
//   tsx hack/release/version.ts x.y.z      move every place to x.y.z and regenerate the chart (make version)
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { CHART_REPOSITORY, IMAGE_REPOSITORY, findVersions, setVersion, versionProblems } from './versions.js';

const root = join(import.meta.dirname, '..', '..');
const [arg] = process.argv.slice(2);

if (arg?.startsWith('--') && arg !== '--image' && arg !== '--chart') {
  console.error(`unknown flag ${arg}: expected --image, --chart or a version (x.y.z)`);
  process.exit(2);
}
if (arg !== undefined && !arg.startsWith('--')) {
  setVersion(root, arg);
  execFileSync('npx', ['--no-install', 'tsx', 'hack/generate-chart.ts'], { cwd: root, stdio: 'inherit' });
  console.log(
    `Version ${arg}: package.json and its lock, src/cli/version.ts, the docs' commands, config/ and the chart`,
  );
}
const found = findVersions(root);
const problems = versionProblems(found);
for (const problem of problems) console.error(problem);
if (problems.length > 0) {
  console.error('the version or image disagree: run `make version VERSION=x.y.z` (it writes every place)');
  process.exit(1);
}
const version = found[0]?.version ?? '';
const image = `${IMAGE_REPOSITORY}:${version}`;
console.log(
  arg === '--image'
    ? image
    : arg === '--chart'
      ? CHART_REPOSITORY
      : `${version} ${image} ${CHART_REPOSITORY}`,
);
