// The audit log as the fault tests read it: a request the apiserver never answered (killed under it) counts as one
// that may have taken effect, so a resume that reached etcd and lost its ResponseComplete line is not read as a
// pause followed by another pause.
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  alternates,
  indeterminate,
  onePerRequest,
  settledSettings,
  type AuditEvent,
} from '../../support/audit.js';
import { REPO_ROOT } from '../../support/manifests.js';

/**
 * A patch of the rollout as the audit log has it: at RequestReceived, before the apiserver read the body, with no
 * body and no response (as in hack/cluster's audit log); at ResponseComplete, with both.
 */
const patch = (id: string, at: string, paused: boolean | null, stage: string, code?: number): AuditEvent => ({
  auditID: id,
  stage,
  verb: 'patch',
  requestURI: '/apis/apps/v1/namespaces/shop/deployments/roll',
  user: { username: 'operator' },
  objectRef: { resource: 'deployments', name: 'roll', namespace: 'shop' },
  requestReceivedTimestamp: `2026-12-05T11:41:${at}Z`,
  ...(stage === 'RequestReceived' ? {} : { requestObject: { spec: { paused } } }),
  ...(code === undefined ? {} : { responseStatus: { code } }),
});

describe('the audit log, one event per request', () => {
  it("reads a real RequestReceived line of the local cluster's policy as a write with no body and no answer", () => {
    const line = readFileSync(join(REPO_ROOT, 'test/fixtures/audit/request-received.jsonl'), 'utf8');
    const event = JSON.parse(line) as AuditEvent;
    expect(event.stage).to.equal('RequestReceived');
    expect(event.requestObject, 'logged before the body is read').to.equal(undefined);
    expect(indeterminate(event)).to.equal(true);
    expect(onePerRequest([event])).to.have.length(1);
  });

  it('keeps the ResponseComplete line of an answered request and the RequestReceived line of one never answered', () => {
    const lines = [
      patch('a', '10.0', true, 'RequestReceived'),
      patch('a', '10.0', true, 'ResponseComplete', 200),
      patch('b', '11.0', null, 'RequestReceived'),
      patch('c', '20.0', true, 'RequestReceived'),
      patch('c', '20.0', true, 'ResponseComplete', 200),
    ];
    const events = onePerRequest(lines);
    expect(events.map((e) => `${e.auditID}:${e.stage}`)).to.deep.equal([
      'a:ResponseComplete',
      'b:RequestReceived',
      'c:ResponseComplete',
    ]);
  });

  it('reads a resume whose response was lost to kill -9 as one that took effect when a pause follows', () => {
    const events = onePerRequest([
      patch('a', '10.0', true, 'ResponseComplete', 200),
      patch('b', '11.0', null, 'RequestReceived'),
      patch('c', '20.0', true, 'ResponseComplete', 200),
      patch('d', '30.0', null, 'ResponseComplete', 200),
    ]);
    const settled = settledSettings(events, 'deployments', 'paused');
    expect(settled.roll).to.deep.equal([true, false, true, false]);
    expect(alternates(settled.roll!)).to.equal(true);
  });

  it('drops an unanswered write between two different settings, and one at the end', () => {
    const between = onePerRequest([
      patch('a', '10.0', true, 'ResponseComplete', 200),
      patch('b', '11.0', null, 'RequestReceived'),
      patch('c', '20.0', null, 'ResponseComplete', 200),
      patch('d', '30.0', true, 'RequestReceived'),
    ]);
    expect(settledSettings(between, 'deployments', 'paused').roll).to.deep.equal([true, false]);
  });

  it('drops an unanswered resume the operator sent again, and still fails two answered pauses in a row', () => {
    const retried = onePerRequest([
      patch('a', '10.0', true, 'ResponseComplete', 200),
      patch('b', '11.0', null, 'RequestReceived'),
      patch('c', '20.0', null, 'ResponseComplete', 200),
    ]);
    expect(settledSettings(retried, 'deployments', 'paused').roll).to.deep.equal([true, false]);
    const twice = onePerRequest([
      patch('a', '10.0', true, 'ResponseComplete', 200),
      patch('c', '20.0', true, 'ResponseComplete', 200),
    ]);
    expect(alternates(settledSettings(twice, 'deployments', 'paused').roll!)).to.equal(false);
  });
});
