import { expect } from 'chai';
import { assessRuntimeVersion } from '../../../src/detection/index.js';

describe('assessRuntimeVersion', () => {
  const table: [string, boolean | undefined, RegExp | undefined][] = [
    ['containerd://1.4.13', true, /Predates/],
    ['containerd://1.5.0', true, /Predates/],
    ['containerd://1.5.9', true, /Predates/],
    ['containerd://1.5.10', false, undefined],
    ['containerd://1.5.18', false, undefined],
    ['containerd://1.6.0', false, /1\.6\.21 \/ 1\.7\.1/],
    ['containerd://v1.6.20', false, /1\.6\.21/],
    ['containerd://1.6.21', false, undefined],
    ['containerd://1.7.0', false, /later fixes/],
    ['containerd://1.7.1', false, undefined],
    ['containerd://2.0.4', false, undefined],
    ['cri-o://1.30.2', undefined, /Not containerd/],
    ['docker://24.0.7', undefined, /Not containerd/],
    ['', undefined, /unrecognised/],
  ];
  for (const [version, predates, note] of table) {
    it(`${version || '(empty)'}: ${predates === undefined ? 'unknown' : predates ? 'predates' : 'has'} the mount fix`, () => {
      const result = assessRuntimeVersion(version);
      expect(result.version).to.equal(version);
      expect(result.predatesMountFix).to.equal(predates);
      if (note) expect(result.note).to.match(note);
      else expect(result.note).to.equal(undefined);
    });
  }
});
