import { expect } from 'chai';
import fc from 'fast-check';
import {
  classifyFailureMessage,
  isIoCause,
  isSandboxFailureEvent,
  parseReservedName,
  type FailureCause,
} from '../../../src/detection/index.js';

// Messages from a production incident (kubelet event form and containerd log form) and variants.
const CASES: { name: string; message: string; cause: FailureCause }[] = [
  {
    name: 'kubelet NameReserved',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to reserve sandbox name "edge-56c86c995f-tqzz2_edge-adapter_da70d1c2-0978-40c1-a9a6-c5a25a7f41a3_0": name "edge-56c86c995f-tqzz2_edge-adapter_da70d1c2-0978-40c1-a9a6-c5a25a7f41a3_0" is reserved for "762b66093089b50109f74fa5a4cc6e7165d916b18dfd1b5c877fc4effff1e558"',
    cause: 'NameReserved',
  },
  {
    name: 'containerd log NameReserved with escaped quotes',
    message:
      'error="failed to reserve sandbox name \\"nginx-deployment-857cbc9c6-f5gjq_default_29d9b646-2ed6-411d-b89a-5e1526de3393_0\\": name \\"nginx-deployment-857cbc9c6-f5gjq_default_29d9b646-2ed6-411d-b89a-5e1526de3393_0\\" is reserved for \\"aa39cc65311ca413accf095a659c372b02e987d5b97687d3241c830f3b1091d5\\""',
    cause: 'NameReserved',
  },
  {
    name: 'container name reserved (CreateContainerError)',
    message:
      'Error: failed to reserve container name "app_web-0_shop_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_1": name "app_web-0_shop_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_1" is reserved for "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"',
    cause: 'NameReserved',
  },
  {
    name: 'kubelet DeadlineExceeded',
    message:
      'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded',
    cause: 'DeadlineExceeded',
  },
  { name: 'bare deadline', message: 'Error: context deadline exceeded', cause: 'DeadlineExceeded' },
  {
    name: 'CNI IPAM exhausted',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "0a1b...": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.244.1.1-10.244.1.254',
    cause: 'Network',
  },
  {
    name: 'CNI timing out is still Network',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "9f": plugin type="calico" failed (add): context deadline exceeded',
    cause: 'Network',
  },
  {
    name: 'CNI not initialised',
    message: 'Failed to create pod sandbox: rpc error: code = Unknown desc = cni plugin not initialized',
    cause: 'Network',
  },
  {
    name: 'network teardown',
    message:
      'rpc error: code = Unknown desc = failed to destroy network for sandbox "abc": plugin type="portmap" failed (delete)',
    cause: 'Network',
  },
  {
    name: 'pause image pull',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox image "registry.k8s.io/pause:3.9": failed to pull image "registry.k8s.io/pause:3.9": i/o timeout',
    cause: 'ImagePull',
  },
  {
    name: 'runtime handler missing',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "kata" is configured',
    cause: 'RuntimeHandler',
  },
  {
    name: 'unrecognised',
    message: 'Failed to create pod sandbox: rpc error: code = Unknown desc = mount failed',
    cause: 'Other',
  },
  { name: 'empty', message: '', cause: 'Other' },
];

describe('classifyFailureMessage', () => {
  for (const { name, message, cause } of CASES) {
    it(`classifies ${name} as ${cause}`, () => {
      expect(classifyFailureMessage(message).cause).to.equal(cause);
    });
  }

  it('parses the reserved sandbox name and the reserving id from the kubelet form', () => {
    const result = classifyFailureMessage(CASES[0]!.message);
    expect(result.name).to.deep.equal({
      raw: 'edge-56c86c995f-tqzz2_edge-adapter_da70d1c2-0978-40c1-a9a6-c5a25a7f41a3_0',
      pod: 'edge-56c86c995f-tqzz2',
      namespace: 'edge-adapter',
      uid: 'da70d1c2-0978-40c1-a9a6-c5a25a7f41a3',
      attempt: 0,
    });
    expect(result.reservedFor).to.equal('762b66093089b50109f74fa5a4cc6e7165d916b18dfd1b5c877fc4effff1e558');
  });

  it('parses the escaped containerd log form', () => {
    const result = classifyFailureMessage(CASES[1]!.message);
    expect(result.name?.pod).to.equal('nginx-deployment-857cbc9c6-f5gjq');
    expect(result.name?.namespace).to.equal('default');
    expect(result.reservedFor).to.equal('aa39cc65311ca413accf095a659c372b02e987d5b97687d3241c830f3b1091d5');
  });

  it('parses a container name with the container first', () => {
    const result = classifyFailureMessage(CASES[2]!.message);
    expect(result.name).to.include({ container: 'app', pod: 'web-0', namespace: 'shop', attempt: 1 });
  });

  it('keeps the cause when the reserved name cannot be parsed', () => {
    const result = classifyFailureMessage(
      'failed to reserve sandbox name "weird": name "weird" is reserved for "x"',
    );
    expect(result.cause).to.equal('NameReserved');
    expect(result.name).to.equal(undefined);
    expect(result.reservedFor).to.equal('x');
  });

  it('is not fooled by pod names that look like network words', () => {
    const pod = 'cni-network-setup-7d9f_ipam_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_0';
    const message = `failed to reserve sandbox name "${pod}": name "${pod}" is reserved for "${'c'.repeat(64)}"`;
    expect(classifyFailureMessage(message).cause).to.equal('NameReserved');
  });
});

describe('classifier properties', () => {
  const networkPhrases = [
    'failed to setup network for sandbox "x"',
    'failed to allocate for range 0',
    'no IP addresses available in range set',
    'networkPlugin cni failed to set up pod',
    'plugin type="bridge" failed (add)',
  ];

  it('never throws on arbitrary input', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (message) => {
        const result = classifyFailureMessage(message);
        expect(result.cause).to.be.a('string');
      }),
      { numRuns: 2000 },
    );
  });

  it('never calls a Network message an IO cause, whatever surrounds it', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 120 }),
        fc.constantFrom(...networkPhrases),
        fc.constantFrom(
          '',
          'context deadline exceeded',
          'failed to reserve sandbox name "a_b_c_0"',
          'code = DeadlineExceeded',
        ),
        fc.string({ maxLength: 120 }),
        (before, phrase, ioWords, after) => {
          const result = classifyFailureMessage(`${before} ${ioWords} ${phrase} ${after}`);
          expect(result.cause).to.equal('Network');
          expect(isIoCause(result.cause)).to.equal(false);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('round-trips generated sandbox names through the message', () => {
    const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?$/);
    fc.assert(
      fc.property(
        label,
        label,
        fc.uuid(),
        fc.nat(20),
        fc.boolean(),
        (pod, namespace, uid, attempt, escaped) => {
          const name = `${pod}_${namespace}_${uid}_${attempt}`;
          const q = escaped ? '\\"' : '"';
          const message = `failed to reserve sandbox name ${q}${name}${q}: name ${q}${name}${q} is reserved for ${q}${'f'.repeat(64)}${q}`;
          const result = classifyFailureMessage(message);
          expect(result.cause).to.equal('NameReserved');
          expect(result.name).to.deep.equal({ raw: name, pod, namespace, uid, attempt });
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('parseReservedName', () => {
  it('rejects names without a uid or numeric attempt', () => {
    expect(parseReservedName('a_b_c_d')).to.equal(undefined);
    expect(parseReservedName('a_b_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_x')).to.equal(undefined);
    expect(parseReservedName('a_b')).to.equal(undefined);
    expect(parseReservedName('_b_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_1')).to.equal(undefined);
  });
});

describe('isSandboxFailureEvent', () => {
  const base = { involvedKind: 'Pod', message: 'x' };
  it('accepts FailedCreatePodSandBox on pods', () => {
    expect(isSandboxFailureEvent({ ...base, reason: 'FailedCreatePodSandBox' })).to.equal(true);
  });
  it('accepts Failed container-creation errors', () => {
    expect(
      isSandboxFailureEvent({ ...base, reason: 'Failed', message: 'Error: context deadline exceeded' }),
    ).to.equal(true);
    expect(
      isSandboxFailureEvent({
        ...base,
        reason: 'Failed',
        message: 'Error: failed to reserve container name "a"',
      }),
    ).to.equal(true);
  });
  it('ignores other Failed events, other reasons and other kinds', () => {
    expect(isSandboxFailureEvent({ ...base, reason: 'Failed', message: 'Error: ErrImagePull' })).to.equal(
      false,
    );
    expect(isSandboxFailureEvent({ ...base, reason: 'BackOff', message: 'Back-off restarting' })).to.equal(
      false,
    );
    expect(
      isSandboxFailureEvent({ involvedKind: 'Node', reason: 'FailedCreatePodSandBox', message: '' }),
    ).to.equal(false);
  });
});
