// One version per release: hack/release/versions.ts finds every place that carries it, names each one that
// disagrees, and moves them all at once (make version).
import { expect } from 'chai';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import {
  DOC_FILES,
  IMAGE_FILES,
  IMAGE_REPOSITORY,
  VERSION_FILE,
  findVersions,
  setVersion,
  versionProblems,
} from '../../../hack/release/versions.js';
import { REPO_ROOT } from '../../support/manifests.js';

describe('the release version', () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'version-'));
    for (const file of ['package.json', 'package-lock.json', VERSION_FILE, ...DOC_FILES, ...IMAGE_FILES])
      cpSync(join(REPO_ROOT, file), join(root, file), { recursive: true });
  });
  afterEach(() => {
    rmSync(root, { recursive: true, force: true });
  });

  it("is one in this checkout: package.json, its lock, --version, config/'s images and the chart agree", () => {
    expect(versionProblems(findVersions(REPO_ROOT))).to.deep.equal([]);
    const version = findVersions(REPO_ROOT)[0]!.version;
    const chart = parse(readFileSync(join(REPO_ROOT, 'charts/sandbox-remediator/Chart.yaml'), 'utf8')) as {
      version: string;
      appVersion: string;
    };
    const values = parse(readFileSync(join(REPO_ROOT, 'charts/sandbox-remediator/values.yaml'), 'utf8')) as {
      image: { repository: string; tag: string };
    };
    expect([chart.version, chart.appVersion, values.image.tag]).to.deep.equal([version, version, version]);
    expect(values.image.repository, 'the chart pulls from where the release publishes').to.equal(
      IMAGE_REPOSITORY,
    );
  });

  it('names every place that disagrees, and an image that is not the published one', () => {
    const manager = join(root, IMAGE_FILES[0]!);
    writeFileSync(
      manager,
      readFileSync(manager, 'utf8').replace(/image: \S+/, 'image: sandbox-remediator:9.9.9'),
    );
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(root, 'package.json'), JSON.stringify({ ...pkg, version: '1.2.3' }));
    const readme = join(root, 'README.md');
    writeFileSync(readme, readFileSync(readme, 'utf8').replace(/--version \S+/, '--version 0.0.1'));
    const problems = versionProblems(findVersions(root));
    expect(problems.filter((p) => p.startsWith('README.md: 0.0.1'))).to.have.length(1);
    expect(problems.join('\n')).to.contain('package-lock.json').and.contain(VERSION_FILE);
    expect(problems.filter((p) => p.startsWith(`${IMAGE_FILES[0]}:`))).to.have.length(2);
    expect(problems.filter((p) => p.startsWith(`${IMAGE_FILES[1]}:`))).to.have.length(1);
  });

  it('moves every place to a new version, keeping what else the files say, and refuses what is not x.y.z', () => {
    const before = readFileSync(join(root, IMAGE_FILES[0]!), 'utf8');
    setVersion(root, '1.4.0');
    const found = findVersions(root);
    expect(found.map((f) => f.version)).to.deep.equal(found.map(() => '1.4.0'));
    expect(versionProblems(found)).to.deep.equal([]);
    const after = readFileSync(join(root, IMAGE_FILES[0]!), 'utf8');
    expect(after.split('\n').filter((l, i) => l !== before.split('\n')[i])).to.have.length(1);
    expect(() => {
      setVersion(root, 'v1.4');
    }).to.throw(/not a version/);
  });
});
