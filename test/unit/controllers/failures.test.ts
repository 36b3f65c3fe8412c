// A failed write logged once as what it is (refused for good, or to be retried), and Failures: what one reconcile
// could not write, failing it at the end only for the retriable ones.
import { expect } from 'chai';
import { Failures, logWriteFailure } from '../../../src/controllers/failures.js';
import type { Logger } from '../../../src/observability/log.js';
import { TerminalError } from '../../../src/runtime/controller.js';

interface Line {
  level: 'error' | 'warn' | 'info' | 'debug';
  message: string;
  fields: Record<string, unknown> | undefined;
}

function recording(): { lines: Line[]; logger: Logger } {
  const lines: Line[] = [];
  const at = (level: Line['level']) => (message: string, fields?: Record<string, unknown>) => {
    lines.push({ level, message, fields });
  };
  return { lines, logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') } };
}

/** As client-node's ApiException carries it: a code and the apiserver's Status. */
const apiError = (code: number, reason: string, message: string) => ({ code, body: { reason, message } });

describe('logWriteFailure', () => {
  const cases: { name: string; err: unknown; retriable: boolean; message: string; error: string }[] = [
    {
      name: 'gives up on a write the API refused for what it is (a TerminalError), in its own words',
      err: new TerminalError('422 Unprocessable: spec.taints[0].effect'),
      retriable: false,
      message: 'Gave up on a refused write',
      error: '422 Unprocessable: spec.taints[0].effect',
    },
    {
      name: 'retries a plain error, saying so',
      err: new Error('socket hang up'),
      retriable: true,
      message: 'Failed a write; will retry',
      error: 'socket hang up',
    },
    {
      name: "retries an apiserver error, logged with the apiserver's message, code and reason",
      err: apiError(409, 'Conflict', 'the object has been modified'),
      retriable: true,
      message: 'Failed a write; will retry',
      error: 'the object has been modified (HTTP 409 Conflict)',
    },
    {
      name: 'retries a request that timed out, saying it timed out',
      err: Object.assign(new Error('The user aborted a request.'), { name: 'AbortError' }),
      retriable: true,
      message: 'Failed a write; will retry',
      error: 'timed out: no answer within the request timeout',
    },
    {
      name: 'retries something thrown that is no Error, logged as its string',
      err: 'boom',
      retriable: true,
      message: 'Failed a write; will retry',
      error: 'boom',
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      const { lines, logger } = recording();
      const retriable = logWriteFailure(logger, { policy: 'p', node: 'n1' }, 'cordon node/n1', c.err);
      expect(retriable).to.equal(c.retriable);
      expect(lines).to.deep.equal([
        {
          level: 'warn',
          message: c.message,
          fields: { policy: 'p', node: 'n1', what: 'cordon node/n1', error: c.error },
        },
      ]);
    });
});

describe('Failures', () => {
  it('fails nothing when nothing failed', () => {
    const { lines, logger } = recording();
    const failures = new Failures(logger, { policy: 'p' });
    expect(() => {
      failures.throwIfAny();
    }).not.to.throw();
    expect(failures.retriable).to.deep.equal([]);
    expect(lines).to.deep.equal([]);
  });

  it('logs a refused write with its key and does not fail the reconcile for it', () => {
    const { lines, logger } = recording();
    const failures = new Failures(logger, { policy: 'p' });
    failures.add('taint node/n1', new TerminalError('denied by an admission policy'));
    expect(failures.retriable).to.deep.equal([]);
    expect(() => {
      failures.throwIfAny();
    }).not.to.throw();
    expect(lines.map((l) => [l.message, l.fields])).to.deep.equal([
      [
        'Gave up on a refused write',
        { policy: 'p', what: 'taint node/n1', error: 'denied by an admission policy' },
      ],
    ]);
  });

  it('keeps every retriable failure, in order, and leaves the refused ones out', () => {
    const { logger } = recording();
    const failures = new Failures(logger, { policy: 'p' });
    const first = new Error('first');
    const second = new Error('second');
    failures.add('a', first);
    failures.add('b', new TerminalError('refused'));
    failures.add('c', second);
    expect(failures.retriable).to.deep.equal([first, second]);
  });

  const thrown: { name: string; errs: unknown[]; message: string }[] = [
    {
      name: 'fails with how many writes failed and the first one, as its cause',
      errs: [new Error('conflict on n1'), new Error('timeout on n2')],
      message: '2 write(s) failed, first: conflict on n1',
    },
    {
      name: 'counts only the retriable ones',
      errs: [new TerminalError('refused'), new Error('timeout on n2')],
      message: '1 write(s) failed, first: timeout on n2',
    },
    {
      name: 'names a first failure that is no Error by its string',
      errs: ['gone away', new Error('later')],
      message: '2 write(s) failed, first: gone away',
    },
  ];
  for (const c of thrown)
    it(c.name, () => {
      const { logger } = recording();
      const failures = new Failures(logger, {});
      c.errs.forEach((err, i) => {
        failures.add(`write ${i}`, err);
      });
      const firstRetriable = c.errs.find((e) => !(e instanceof TerminalError));
      let caught: unknown;
      try {
        failures.throwIfAny();
      } catch (err) {
        caught = err;
      }
      expect(caught).to.be.instanceOf(Error);
      expect((caught as Error).message).to.equal(c.message);
      expect((caught as Error).cause).to.equal(firstRetriable);
    });
});
