import { ApiException } from '@kubernetes/client-node';
import { expect } from 'chai';
import {
  apiStatus,
  describeError,
  isConflict,
  isGone,
  isInvalid,
  isNotFound,
  isPatchNotApplicable,
  isTooManyRequests,
} from '../../src/kube/errors.js';

const status = (code: number, body: unknown) => new ApiException(code, 'HTTP-Code: noise', body, {});

describe('kube/errors', () => {
  it('reads the Status body the apiserver sends, as a string or an object', () => {
    const err = status(
      429,
      JSON.stringify({ reason: 'TooManyRequests', message: 'slow down', details: { retryAfterSeconds: 3 } }),
    );
    expect(apiStatus(err)).to.deep.equal({
      code: 429,
      reason: 'TooManyRequests',
      message: 'slow down',
      retryAfterSeconds: 3,
    });
    expect(apiStatus(status(404, { message: 'gone fishing' }))?.message).to.equal('gone fishing');
    expect(apiStatus(status(500, 'not json'))).to.deep.equal({ code: 500, message: 'HTTP 500' });
  });

  it('tells a JSON Patch the API could not apply from a body it refuses for what it says', () => {
    // As kube-apiserver answers a failed `test` (and a `remove` of a key that is not there).
    const notApplied = { kind: 'Status', status: 'Failure', reason: 'Invalid', code: 422, details: {} };
    expect(
      isPatchNotApplicable(
        status(422, {
          ...notApplied,
          message: 'the server rejected our request due to an error in our request',
        }),
      ),
    ).to.equal(true);
    const schema =
      'SandboxHealth.sandbox.remediator.io "n1" is invalid: status.stuckPodCount: Invalid value: -1: should be greater than or equal to 0';
    expect(isPatchNotApplicable(status(422, { ...notApplied, message: schema }))).to.equal(false);
    const denial = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no";
    expect(isPatchNotApplicable(status(422, { ...notApplied, message: denial }))).to.equal(false);
    expect(isPatchNotApplicable(status(404, { message: 'not found' }))).to.equal(false);
  });

  it('classifies by code', () => {
    expect(isNotFound(status(404, ''))).to.equal(true);
    expect(isConflict(status(409, ''))).to.equal(true);
    expect(isGone(status(410, ''))).to.equal(true);
    expect(isTooManyRequests(status(429, ''))).to.equal(true);
    expect(isInvalid(status(422, ''))).to.equal(true);
    expect(isInvalid(status(400, ''))).to.equal(true);
    // An admission policy's refusal is for what the request is; RBAC's can be lifted by a binding applied meanwhile.
    const denial =
      "nodes \"n1\" is forbidden: ValidatingAdmissionPolicy 'sandbox-remediator-operator' with binding 'sandbox-remediator-operator' denied request: the operator may add or remove only taints under sandbox.remediator.io/, not dedicated:NoSchedule";
    expect(isInvalid(status(403, { reason: 'Forbidden', message: denial }))).to.equal(true);
    const rbac = 'nodes "n1" is forbidden: User "system:serviceaccount:x:y" cannot patch resource "nodes"';
    expect(isInvalid(status(403, { reason: 'Forbidden', message: rbac }))).to.equal(false);
    // So is a webhook's denial (403 unless the webhook says otherwise).
    const webhook = 'admission webhook "freeze.example.com" denied the request: pods are frozen';
    expect(isInvalid(status(403, { reason: 'Forbidden', message: webhook }))).to.equal(true);
    expect(isNotFound(new Error('x'))).to.equal(false);
    expect(apiStatus({ code: 'nope', body: '' })).to.equal(undefined);
  });

  it('describes errors in one line, preferring the apiserver message', () => {
    expect(describeError(status(404, { reason: 'NotFound', message: 'nodes "x" not found' }))).to.equal(
      'nodes "x" not found (HTTP 404 NotFound)',
    );
    expect(describeError(new Error('boom'))).to.equal('boom');
    expect(describeError('plain')).to.equal('plain');
  });
});

describe('kube/errors on watch failures', () => {
  it('reads the statusCode that client-node Watch attaches', () => {
    const err = Object.assign(new Error('Gone'), { statusCode: 410 });
    expect(isGone(err)).to.equal(true);
    expect(describeError(Object.assign(new Error('Too Many Requests'), { statusCode: 429 }))).to.equal(
      'Too Many Requests (HTTP 429)',
    );
  });
});
