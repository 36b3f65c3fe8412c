import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import fc from 'fast-check';
import {
  classifyFailureMessage,
  isIoCause,
  type ContainerRuntime,
  type FailureCause,
} from '../../../src/detection/index.js';

// Real messages, each quoted from a public issue and labelled by hand (test/fixtures/sandbox-messages). Its shape is
// checked by corpus-shape.test.ts; here, what the classifier makes of it.
const CORPUS = new URL('../../fixtures/sandbox-messages/corpus.jsonl', import.meta.url);

interface Entry {
  id: string;
  message: string;
  cause: FailureCause;
  /** The node's runtime as the issue tells it, which the message's wording need not. */
  runtime: string;
  source: string;
}

const entries = readFileSync(CORPUS, 'utf8')
  .split('\n')
  .filter((line) => line !== '')
  .map((line) => JSON.parse(line) as Entry);

// The runtimes a node labelled so can have said a message in: cri-dockerd words as dockershim did, and a Windows
// node runs containerd or dockershim with hcsshim beneath.
const WORDINGS_OF: Record<string, readonly ContainerRuntime[]> = {
  containerd: ['containerd'],
  'cri-o': ['cri-o'],
  dockershim: ['dockershim'],
  docker: ['dockershim'],
  'windows-hcsshim': ['windows', 'containerd', 'dockershim'],
};

// Where the wording names another runtime than the issue does, and why the wording is trusted.
const RUNTIME_DISPUTED: Record<string, string> = {
  'multus-no-networks-found-cilium':
    'only dockershim says "failed to set up sandbox container ... network for pod" and "networkPlugin cni failed"; the reporter said containerd',
};

describe('classifier on the corpus of real messages', () => {
  it('has messages to read', () => {
    expect(entries.length).to.be.above(0);
  });

  for (const entry of entries) {
    it(`classifies ${entry.id} as ${entry.cause}`, () => {
      expect(classifyFailureMessage(entry.message).cause, `${entry.source}\n${entry.message}`).to.equal(
        entry.cause,
      );
    });
  }

  it('never names a runtime the node did not run', () => {
    const contradicted = entries
      .map((entry) => ({ entry, runtime: classifyFailureMessage(entry.message).runtime }))
      .filter(
        ({ entry, runtime }) =>
          runtime !== undefined &&
          entry.runtime in WORDINGS_OF &&
          !WORDINGS_OF[entry.runtime]!.includes(runtime) &&
          !(entry.id in RUNTIME_DISPUTED),
      )
      .map(({ entry, runtime }) => `${entry.id}: labelled ${entry.runtime}, worded as ${runtime}`);
    expect(contradicted).to.deep.equal([]);
  });
});

/** How the same message reaches us otherwise: re-cased, re-wrapped, re-quoted by a log shipper or a copy. */
interface Variation {
  cases: boolean[];
  spaces: string[];
  quotes: string[];
}

function vary(message: string, { cases, spaces, quotes }: Variation): string {
  let spaceAt = 0;
  let quoteAt = 0;
  return message
    .replace(/\\*["']/g, () => quotes[quoteAt++ % quotes.length]!)
    .replace(/\s+/g, () => spaces[spaceAt++ % spaces.length]!)
    .split('')
    .map((c, i) => (cases[i % cases.length] ? c.toUpperCase() : c.toLowerCase()))
    .join('');
}

const variation: fc.Arbitrary<Variation> = fc.record({
  cases: fc.array(fc.boolean(), { minLength: 1, maxLength: 16 }),
  spaces: fc.array(fc.constantFrom(' ', '  ', '\t', '\n', '\r\n', ' \t\n  '), { minLength: 1, maxLength: 8 }),
  quotes: fc.array(fc.constantFrom('"', "'", '\\"', ''), { minLength: 1, maxLength: 8 }),
});

describe('classifier properties on the corpus', () => {
  const notIo = entries.filter((entry) => !isIoCause(entry.cause));
  const io = entries.filter((entry) => isIoCause(entry.cause));

  it('never calls a message labelled Network, ImagePull, RuntimeHandler or Other IO, however it is cased, spaced or quoted', () => {
    fc.assert(
      fc.property(fc.constantFrom(...notIo), variation, (entry, how) => {
        const varied = vary(entry.message, how);
        const { cause } = classifyFailureMessage(varied);
        expect(isIoCause(cause), `${entry.id} as ${JSON.stringify(varied)}: ${cause}`).to.equal(false);
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps every cause, IO ones too, however the message is cased, spaced or quoted', () => {
    fc.assert(
      fc.property(fc.constantFrom(...notIo, ...io), variation, (entry, how) => {
        const varied = vary(entry.message, how);
        expect(classifyFailureMessage(varied).cause, `${entry.id} as ${JSON.stringify(varied)}`).to.equal(
          entry.cause,
        );
      }),
      { numRuns: 1000 },
    );
  });
});
