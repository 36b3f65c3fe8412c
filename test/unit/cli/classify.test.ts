import { expect } from 'chai';
import {
  classifyInputs,
  formatClassifyText,
  readClassifyInputs,
  runClassify,
  type ClassifyIo,
  type ClassifyResult,
} from '../../../src/cli/classify.js';

const UID = 'da70d1c2-0978-40c1-a9a6-c5a25a7f41a3';
const HOLDER = '762b66093089b50109f74fa5a4cc6e7165d916b18dfd1b5c877fc4effff1e558';
const RESERVED = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "web-0_shop_${UID}_0": name "web-0_shop_${UID}_0" is reserved for "${HOLDER}"`;
const CNI_TIMEOUT =
  'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "9f": plugin type="calico" failed (add): context deadline exceeded';
const CRIO = `error reserving pod name k8s_web-0_shop_${UID}_0 for id ${'b'.repeat(64)}: name is reserved`;

/** A `kubectl get events -o json` List, as kubectl prints it (the fields that matter here). */
function eventList(items: unknown[]): string {
  return JSON.stringify(
    { apiVersion: 'v1', kind: 'List', items, metadata: { resourceVersion: '' } },
    null,
    4,
  );
}

const coreEvent = (namespace: string, name: string, reason: string, message: string) => ({
  apiVersion: 'v1',
  kind: 'Event',
  metadata: { name: `${name}.1`, namespace },
  involvedObject: { kind: 'Pod', namespace, name },
  reason,
  message,
});

describe('readClassifyInputs', () => {
  it('reads a message per non-blank line, numbered as in the file', () => {
    expect(readClassifyInputs(`${RESERVED}\n\n  \r\n${CNI_TIMEOUT}\r\n`, 'events.txt')).to.deep.equal([
      { source: 'events.txt:1', message: RESERVED },
      { source: 'events.txt:4', message: CNI_TIMEOUT },
    ]);
  });

  it("reads a List of Events: each item's message, named namespace/name reason", () => {
    const text = eventList([
      coreEvent('shop', 'web-0', 'FailedCreatePodSandBox', RESERVED),
      { ...coreEvent('shop', 'web-1', 'Failed', 'x'), message: undefined }, // no message: nothing to classify
      // events.k8s.io/v1 says note and regarding
      { metadata: { namespace: 'edge' }, regarding: { name: 'api-7' }, reason: 'Failed', note: CRIO },
      { involvedObject: { kind: 'Node', name: 'n1' }, message: CNI_TIMEOUT },
    ]);
    expect(readClassifyInputs(text, 'stdin')).to.deep.equal([
      { source: 'shop/web-0 FailedCreatePodSandBox', message: RESERVED },
      { source: 'edge/api-7 Failed', message: CRIO },
      { source: 'n1', message: CNI_TIMEOUT },
    ]);
  });

  it('reads JSON that is not a List, and JSON lines, as lines', () => {
    const jsonLines = '{"msg":"a"}\n{"msg":"b"}';
    expect(readClassifyInputs(jsonLines, 'f').map((i) => i.source)).to.deep.equal(['f:1', 'f:2']);
    expect(readClassifyInputs('{"items": "no"}', 'f')).to.deep.equal([
      { source: 'f:1', message: '{"items": "no"}' },
    ]);
  });
});

describe('classifyInputs', () => {
  it('gives the cause, whether it is IO, the runtime, and the reserved name and holder when told', () => {
    const results = classifyInputs([
      { source: 'a', message: RESERVED },
      { source: 'b', message: CNI_TIMEOUT },
      { source: 'c', message: CRIO },
      { source: 'd', message: 'mount failed' },
    ]);
    expect(results).to.deep.equal([
      {
        source: 'a',
        cause: 'NameReserved',
        io: true,
        runtime: 'containerd',
        reservedName: `web-0_shop_${UID}_0`,
        reservedFor: HOLDER,
        message: RESERVED,
      },
      { source: 'b', cause: 'Network', io: false, runtime: 'containerd', message: CNI_TIMEOUT },
      {
        source: 'c',
        cause: 'NameReserved',
        io: true,
        runtime: 'cri-o',
        reservedName: `k8s_web-0_shop_${UID}_0`,
        message: CRIO,
      },
      { source: 'd', cause: 'Other', io: false, message: 'mount failed' },
    ]);
  });
});

describe('formatClassifyText', () => {
  it('shows each verdict under its source, the message on one line and cut, then the counts', () => {
    const results = classifyInputs([
      { source: 'shop/web-0 FailedCreatePodSandBox', message: RESERVED },
      { source: 'f:2', message: `plugin type="bridge"\n  failed (add): context deadline exceeded` },
      { source: 'f:3', message: 'mount failed' },
    ]);
    expect(formatClassifyText(results)).to.equal(
      [
        'shop/web-0 FailedCreatePodSandBox',
        `  NameReserved (IO)  runtime containerd  reserved web-0_shop_${UID}_0  held by 762b66093089`,
        `  ${RESERVED.slice(0, 159)}…`,
        '',
        'f:2',
        '  Network (not IO)',
        '  plugin type="bridge" failed (add): context deadline exceeded',
        '',
        'f:3',
        '  Other (not IO)',
        '  mount failed',
        '',
        '3 messages: 1 IO (NameReserved 1), 2 not IO (Network 1, Other 1)',
        '',
      ].join('\n'),
    );
  });

  it('says so when there is nothing to classify', () => {
    expect(formatClassifyText([])).to.equal('No messages.\n');
    const one: ClassifyResult = { source: 's', cause: 'Other', io: false, message: 'm' };
    expect(formatClassifyText([one])).to.match(/\n1 message: 0 IO, 1 not IO \(Other 1\)\n$/);
  });
});

describe('runClassify', () => {
  function fakeIo(files: Record<string, string>) {
    const out: string[] = [];
    const err: string[] = [];
    const read: string[] = [];
    const io: ClassifyIo = {
      read: (file) => {
        read.push(file);
        const text = files[file];
        return text === undefined ? Promise.reject(new Error('ENOENT')) : Promise.resolve(text);
      },
      write: (text) => out.push(text),
      error: (text) => err.push(text),
    };
    return { io, out, err, read };
  }

  it('reads standard input when given no files, and prints JSON with -o json', async () => {
    const { io, out, read } = fakeIo({ '-': eventList([coreEvent('shop', 'web-0', 'Failed', CRIO)]) });
    expect(await runClassify([], { output: 'json' }, io)).to.equal(0);
    expect(read).to.deep.equal(['-']);
    const printed = JSON.parse(out.join('')) as ClassifyResult[];
    expect(printed).to.have.length(1);
    expect(printed[0]).to.include({
      source: 'shop/web-0 Failed',
      cause: 'NameReserved',
      io: true,
      runtime: 'cri-o',
    });
  });

  it('reads every file in turn, and exits 2 naming a file it cannot read', async () => {
    const { io, out, err } = fakeIo({ a: CNI_TIMEOUT });
    expect(await runClassify(['a', 'b'], { output: 'text' }, io)).to.equal(2);
    expect(out).to.deep.equal([]);
    expect(err.join('')).to.equal('sandbox-remediator classify: cannot read b: ENOENT\n');
  });

  it('exits 0 whatever the causes', async () => {
    const { io, out } = fakeIo({ a: `${CNI_TIMEOUT}\n${RESERVED}` });
    expect(await runClassify(['a'], { output: 'text' }, io)).to.equal(0);
    expect(out.join('')).to.contain('a:2\n  NameReserved (IO)');
  });
});
