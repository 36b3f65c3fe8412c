import { readFileSync } from 'node:fs';
import { expect } from 'chai';

// The shape of the corpus of real sandbox-failure messages, not what the classifier makes of them: that is
// asserted against the same file by the classifier's own tests.
const CORPUS = new URL('../../fixtures/sandbox-messages/corpus.jsonl', import.meta.url);

const CAUSES = ['NameReserved', 'DeadlineExceeded', 'Network', 'ImagePull', 'RuntimeHandler', 'Other'];
const REQUIRED_RUNTIMES = ['containerd', 'cri-o', 'dockershim', 'windows-hcsshim'];
const RUNTIMES = [...REQUIRED_RUNTIMES, 'docker', 'unknown'];
// The CNIs the corpus must cover with at least one Network message, then others an entry may name.
const REQUIRED_CNIS = [
  'calico',
  'cilium',
  'flannel',
  'aws-vpc-cni',
  'azure-cni',
  'weave',
  'multus',
  'ovn-kubernetes',
];
const CNIS = [...REQUIRED_CNIS, 'openshift-sdn', 'kube-ovn', 'antrea', 'canal', 'kube-router', 'win-bridge'];
const FIELDS = ['id', 'message', 'cause', 'runtime', 'runtimeVersion', 'cni', 'source', 'note'];
const REQUIRED = ['id', 'message', 'cause', 'runtime', 'source'];

interface Entry {
  id: string;
  message: string;
  cause: string;
  runtime: string;
  runtimeVersion?: string;
  cni?: string;
  source: string;
  note?: string;
}

const lines = readFileSync(CORPUS, 'utf8').split('\n');
if (lines.at(-1) === '') lines.pop();

function parseAll(): Entry[] {
  return lines.map((line) => JSON.parse(line) as Entry);
}

describe('sandbox-message corpus', () => {
  it('is one JSON object per line, with no blank lines', () => {
    lines.forEach((line, i) => {
      let parsed: unknown;
      expect(
        () => {
          parsed = JSON.parse(line) as unknown;
        },
        `line ${i + 1}`,
      ).not.to.throw();
      expect(parsed, `line ${i + 1}`)
        .to.be.an('object')
        .and.not.be.an('array');
    });
  });

  const entries = parseAll();

  it('holds at least 100 messages', () => {
    expect(entries.length).to.be.at.least(100);
  });

  it('has only known fields, the required ones, and non-empty strings', () => {
    for (const entry of entries) {
      const keys = Object.keys(entry);
      expect(FIELDS, entry.id).to.include.members(keys);
      expect(keys, entry.id).to.include.members(REQUIRED);
      for (const key of keys) {
        const value = (entry as unknown as Record<string, unknown>)[key];
        expect(value, `${entry.id}.${key}`).to.be.a('string').and.not.equal('');
      }
    }
  });

  it('has unique kebab-case ids', () => {
    const ids = entries.map((e) => e.id);
    expect(new Set(ids).size).to.equal(ids.length);
    for (const id of ids) expect(id).to.match(/^[a-z0-9]+(-[a-z0-9]+)*$/);
  });

  it('has unique messages', () => {
    const seen = new Map<string, string>();
    for (const { id, message } of entries) {
      expect(seen.get(message), `${id} repeats a message`).to.equal(undefined);
      seen.set(message, id);
    }
  });

  it('uses only allowed causes, runtimes and CNIs', () => {
    for (const entry of entries) {
      expect(CAUSES, entry.id).to.include(entry.cause);
      expect(RUNTIMES, entry.id).to.include(entry.runtime);
      if (entry.cni !== undefined) expect(CNIS, entry.id).to.include(entry.cni);
    }
  });

  it('cites an https URL for every message', () => {
    for (const { id, source } of entries) {
      expect(new URL(source).protocol, id).to.equal('https:');
    }
  });

  describe('coverage', () => {
    for (const cause of CAUSES) {
      it(`has a ${cause} message`, () => {
        expect(entries.some((e) => e.cause === cause)).to.equal(true);
      });
    }

    for (const runtime of REQUIRED_RUNTIMES) {
      it(`has a message from ${runtime}`, () => {
        expect(entries.some((e) => e.runtime === runtime)).to.equal(true);
      });
    }

    for (const cni of REQUIRED_CNIS) {
      it(`has a Network message from ${cni}`, () => {
        expect(entries.some((e) => e.cni === cni && e.cause === 'Network')).to.equal(true);
      });
    }

    it('has containerd name reservations in its wording, and timeouts', () => {
      const containerd = entries.filter((e) => e.runtime === 'containerd');
      expect(
        containerd.some(
          (e) => e.cause === 'NameReserved' && /failed to reserve sandbox name/.test(e.message),
        ),
      ).to.equal(true);
      expect(containerd.some((e) => e.cause === 'DeadlineExceeded')).to.equal(true);
    });

    it("has each of cri-o's name-reservation wordings, and a timeout", () => {
      const crio = entries.filter((e) => e.runtime === 'cri-o');
      for (const wording of [
        /error reserving pod name/,
        /error reserving ctr name/,
        /already reserved for pod/,
      ]) {
        expect(
          crio.some((e) => e.cause === 'NameReserved' && wording.test(e.message)),
          String(wording),
        ).to.equal(true);
      }
      expect(crio.some((e) => e.cause === 'DeadlineExceeded')).to.equal(true);
    });

    it('has runtime-handler messages for a missing handler', () => {
      const handler = entries.filter((e) => e.cause === 'RuntimeHandler');
      expect(handler.some((e) => /no runtime for "[^"]+" is configured/.test(e.message))).to.equal(true);
    });

    // The mixes whose surface words point one way and whose cause is another, tagged by id prefix.
    const mixes: [string, string, RegExp][] = [
      ['mix-cni-timeout-', 'Network', /deadline exceeded|timeout|timed out/i],
      ['mix-pause-timeout-', 'ImagePull', /deadline exceeded|DeadlineExceeded|timeout|timed out/i],
      ['mix-name-', '', /calico|cilium|network|flannel|weave/i],
    ];
    for (const [prefix, cause, words] of mixes) {
      it(`has the tricky mix ${prefix}*`, () => {
        const tagged = entries.filter((e) => e.id.startsWith(prefix));
        expect(tagged).not.to.have.length(0);
        for (const entry of tagged) {
          if (cause) expect(entry.cause, entry.id).to.equal(cause);
          expect(entry.message, entry.id).to.match(words);
          expect(entry.note, `${entry.id} says why`).to.be.a('string');
        }
      });
    }

    it('has a pause-image pull that timed out with code = DeadlineExceeded', () => {
      expect(
        entries.some(
          (e) => e.id.startsWith('mix-pause-timeout-') && /code = DeadlineExceeded/.test(e.message),
        ),
      ).to.equal(true);
    });

    it('has a CNI call that ran past context deadline exceeded', () => {
      expect(
        entries.some(
          (e) => e.id.startsWith('mix-cni-timeout-') && /context deadline exceeded/.test(e.message),
        ),
      ).to.equal(true);
    });

    it('has a name-word mix whose cause is not Network', () => {
      expect(entries.some((e) => e.id.startsWith('mix-name-') && e.cause !== 'Network')).to.equal(true);
    });
  });
});
