import { expect } from 'chai';
import {
  checkDocument,
  findMarkers,
  formatNumber,
  renderTemplate,
  updateDocument,
} from '../../../hack/figures/markers.js';

const RESULTS: Record<string, unknown> = {
  'detection-latency.json': { p50Ms: 42, p99Ms: 128, pods: 50 },
  'scale.json': {
    sizes: [{ nodes: 1000, startToReadyMs: 3931, patchMs: 575, heapUsedMiB: 65 }],
    profile: { windowMs: 70070.7, idleMs: 50111.5, busyPercent: 28.5 },
    ratio: { idle: null },
    commit: 'b9da2a8f4643f978ffd87320c91aa3939ba57ea5',
    'crafted 100-pod node': { medianMs: 2.045 },
  },
};
const read = (file: string) => RESULTS[file];
const fig = (file: string, template: string, text: string) =>
  `<!-- figure ${file} ${template} -->${text}<!-- /figure -->`;

describe('figures in the docs (hack/figures)', () => {
  describe('renderTemplate', () => {
    const scale = RESULTS['scale.json'];
    const cases: [template: string, expected: string][] = [
      ['{sizes.0.nodes}', '1000'],
      ['{sizes.0.nodes:,} nodes', '1,000 nodes'],
      ['{sizes.0.startToReadyMs / 1000:.1} s', '3.9 s'],
      // Half away from zero on the decimal value: toFixed(2) would say 0.57.
      ['{sizes.0.patchMs / 1000:.2} s', '0.58 s'],
      ['{sizes.0.heapUsedMiB} MiB', '65 MiB'],
      ['{sizes.0.heapUsedMiB:.1} MiB', '65.0 MiB'],
      ['{100 - profile.busyPercent:.1} %', '71.5 %'],
      ['{(profile.windowMs - profile.idleMs) / 1000:.0} s', '20 s'],
      ['{1 / 2.939:.2}×', '0.34×'],
      ['{commit:.7}', 'b9da2a8'],
      ['{ratio.idle}', '–'],
      ['{"crafted 100-pod node".medianMs:.1} ms', '2.0 ms'],
      ['p50 {sizes.0.nodes} and {sizes.0.heapUsedMiB}', 'p50 1000 and 65'],
    ];
    for (const [template, expected] of cases) {
      it(`${template} -> ${expected}`, () => {
        expect(renderTemplate(template, scale)).to.deep.equal({ text: expected });
      });
    }

    const errors: [template: string, error: RegExp][] = [
      ['{sizes.1.nodes}', /no sizes\.1$/],
      ['{sizes.0.cpu}', /no sizes\.0\.cpu$/],
      ['{"crafted 100-pod node".p99Ms}', /no "crafted 100-pod node"\.p99Ms$/],
      ['{sizes.0}', /is an object, not a value/],
      ['{commit / 2}', /needs two numbers/],
      ['{sizes.0.nodes / 0}', /not a finite number/],
      ['{sizes.0.nodes:x}', /the format is not/],
      ['{sizes.0.nodes', /"\{" without "\}"/],
      ['sizes.0.nodes}', /"\}" without "\{"/],
      ['{(sizes.0.nodes}', /"\(" without "\)"/],
      ['{}', /no path/],
    ];
    for (const [template, error] of errors) {
      it(`${template} is refused`, () => {
        const rendered = renderTemplate(template, scale);
        expect(rendered).to.have.property('error').that.matches(error);
      });
    }
  });

  it('formats with separators and decimals together', () => {
    expect(formatNumber(30200, undefined, true)).to.equal('30,200');
    expect(formatNumber(1234567.891, 1, true)).to.equal('1,234,567.9');
    expect(formatNumber(-1.005, 2, false)).to.equal('-1.01');
  });

  describe('findMarkers', () => {
    it('finds each span with its line, file, template and text, several to a line and in table cells', () => {
      const doc = [
        '# Benchmarks',
        '',
        `Detection p50 ${fig('detection-latency.json', '{p50Ms} ms', '42 ms')}, p99 ${fig('detection-latency.json', '{p99Ms} ms', '128 ms')}.`,
        `| 1,000 | ${fig('scale.json', '{sizes.0.startToReadyMs / 1000:.1} s', '3.9 s')} |`,
      ].join('\n');
      const { markers, problems } = findMarkers(doc);
      expect(problems).to.deep.equal([]);
      expect(markers).to.deep.equal([
        { line: 3, file: 'detection-latency.json', template: '{p50Ms} ms', text: '42 ms' },
        { line: 3, file: 'detection-latency.json', template: '{p99Ms} ms', text: '128 ms' },
        { line: 4, file: 'scale.json', template: '{sizes.0.startToReadyMs / 1000:.1} s', text: '3.9 s' },
      ]);
    });

    it('ignores markers in fenced code blocks and code spans, where they are examples', () => {
      const doc = [
        '```markdown',
        `p50 ${fig('detection-latency.json', '{p50Ms} ms', '1 ms')}`,
        '```',
        `Write \`${fig('detection-latency.json', '{p50Ms} ms', '1 ms')}\` around a figure.`,
        '~~~',
        '<!-- /figure -->',
        '~~~',
      ].join('\n');
      expect(findMarkers(doc)).to.deep.equal({ markers: [], problems: [] });
    });

    it('reports a marker not closed on its line, a closing one alone, and one that starts a line', () => {
      const doc = [
        'p50 <!-- figure detection-latency.json {p50Ms} ms -->42 ms',
        '<!-- /figure --> and then',
        fig('detection-latency.json', '{p50Ms} ms', '42 ms'),
        '- ' + fig('detection-latency.json', '{p50Ms} ms', '42 ms'),
        'p50 <!-- figure ../secrets {p50Ms} -->42<!-- /figure -->',
      ].join('\n');
      const { problems } = findMarkers(doc);
      expect(problems.map((p) => [p.line, p.message])).to.deep.equal([
        [1, '<!-- figure detection-latency.json ... --> is not closed by <!-- /figure --> on its line'],
        [2, 'a closing <!-- /figure --> without an opening'],
        [3, 'a figure marker starts the line: Markdown would read it as raw HTML'],
        [4, 'a figure marker starts the line: Markdown would read it as raw HTML'],
        [5, '"../secrets" is not a file name in bench/results/ (NAME.json)'],
      ]);
    });
  });

  describe('checkDocument', () => {
    it('passes a document whose figures say what the results say', () => {
      const doc = `p50 ${fig('detection-latency.json', '{p50Ms} ms', '42 ms')} over ${fig('detection-latency.json', '{pods}', '50')} pods`;
      expect(checkDocument(doc, read)).to.deep.equal([]);
    });

    it('fails a stale figure, naming its line, what it says and what the results say', () => {
      const doc = `# Latency\n\nDetection p50 ${fig('detection-latency.json', '{p50Ms} ms', '28 ms')}, p99 ${fig('detection-latency.json', '{p99Ms} ms', '128 ms')}.`;
      expect(checkDocument(doc, read)).to.deep.equal([
        {
          line: 3,
          message: 'says "28 ms", detection-latency.json says "42 ms" ({p50Ms} ms)',
          says: '28 ms',
          should: '42 ms',
        },
      ]);
    });

    it('fails a marker whose path does not exist, and one whose file does not', () => {
      const doc = [
        `a ${fig('detection-latency.json', '{p95Ms} ms', '99 ms')}`,
        `b ${fig('detection-latency.jsn.json', '{p50Ms} ms', '42 ms')}`,
      ].join('\n');
      expect(checkDocument(doc, read)).to.deep.equal([
        { line: 1, message: 'detection-latency.json: {p95Ms}: no p95Ms' },
        { line: 2, message: 'detection-latency.jsn.json: no such file in bench/results/' },
      ]);
    });
  });

  it('updateDocument rewrites stale spans only, and leaves a broken one and the rest of the text as they were', () => {
    const doc = [
      `p50 ${fig('detection-latency.json', '{p50Ms} ms', '28 ms')}, p99 ${fig('detection-latency.json', '{p99Ms} ms', '128 ms')}`,
      `gone ${fig('detection-latency.json', '{p95Ms} ms', '99 ms')} stays`,
      '```',
      fig('detection-latency.json', '{p50Ms} ms', '28 ms'),
      '```',
    ].join('\n');
    const { text, findings } = updateDocument(doc, read);
    expect(text).to.equal(doc.replace('-->28 ms<', '-->42 ms<'));
    expect(findings.map((f) => f.line)).to.deep.equal([1, 2]);
  });

  it('updateDocument keeps the code spans of a line it rewrites', () => {
    const doc = `\`bench/detection-latency.ts\`: p50 ${fig('detection-latency.json', '{p50Ms} ms', '28 ms')} (\`make bench\`)`;
    expect(updateDocument(doc, read).text).to.equal(
      `\`bench/detection-latency.ts\`: p50 ${fig('detection-latency.json', '{p50Ms} ms', '42 ms')} (\`make bench\`)`,
    );
    // Nothing stale: the document comes back as it was.
    const fresh = doc.replace('-->28 ms<', '-->42 ms<');
    expect(updateDocument(fresh, read).text).to.equal(fresh);
  });
});
