import { expect } from 'chai';
import fc from 'fast-check';
import {
  classifyFailureMessage,
  isIoCause,
  isSandboxFailureEvent,
  normaliseFailureMessage,
  parseCrioReservedName,
  parseReservedName,
  type ContainerRuntime,
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

const CRIO_ID = 'bde18661896527a7f2baa1123840170c5a114113199f9b0b7343737ee0d0739a';

// Other runtimes' wordings, each verbatim from the issue named (the comment says where a message was cut).
const RUNTIME_CASES: {
  name: string;
  message: string;
  cause: FailureCause;
  runtime: ContainerRuntime | undefined;
}[] = [
  {
    // https://github.com/cri-o/cri-o/issues/9097 (cri-o 1.28.9, its log)
    name: 'cri-o pod name reserved',
    message: `error reserving pod name k8s_coredns-648f7fb587-vwgc5_kube-system_8b9d0873-39dc-4863-84e8-fbad3006d86a_0 for id ${CRIO_ID}: name is reserved`,
    cause: 'NameReserved',
    runtime: 'cri-o',
  },
  {
    // https://github.com/kubernetes/kubernetes/issues/112105 (the Failed Event)
    name: 'cri-o container name reserved after a timeout',
    message:
      '(combined from similar events): Error: Kubelet may be retrying requests that are timing out in CRI-O due to system load: context deadline exceeded: error reserving ctr name k8s_minio_data-analytics-prod-pool-0-3_oci-prod-data-analytics_8dec4302-e6b4-4874-9a60-ea305b96347f_0 for id 8424e8fdc1a42daec5810b43a8baf7a9a80f7835a843fc104fe9f621a14983cb: name is reserved',
    cause: 'NameReserved',
    runtime: 'cri-o',
  },
  {
    // https://github.com/cri-o/cri-o/issues/2984 (2019: the Event, without ": name is reserved")
    name: 'cri-o pod name reserved, old wording',
    message:
      'Failed create pod sandbox: rpc error: code = Unknown desc = error reserving pod name k8s_authentication-operator-54f5d6c8c9-qpmd5_openshift-authentication-operator_45d93718-e90f-4888-bad6-660cf9c37a87_0 for id f0325581e9547f0087b6e1f6bf1e8f15d5c926f7b1d6694582129358ff54dfb8',
    cause: 'NameReserved',
    runtime: 'cri-o',
  },
  {
    // https://github.com/cri-o/cri-o/issues/1259 (crictl against cri-o 1.9)
    name: 'cri-o name conflict',
    message:
      'run pod sandbox failed: rpc error: code = Unknown desc = conflict, name "k8s_podsandbox1_redhat.test.crio_redhat-test-crio_1" already reserved for pod "806c14a58b59ee5c8ea28663386270d8ba43536fa8967f0602e8d30beaeecee6"',
    cause: 'NameReserved',
    runtime: 'cri-o',
  },
  {
    // https://github.com/cri-o/cri-o/issues/8884 (its log): a pod and container whose names say "cni"
    name: 'cri-o container name reserved in a CNI pod',
    message:
      'error reserving ctr name k8s_install-cni-binaries_cilium-hpfzl_kube-system_69560d92-4c82-4739-bc31-1b223a394c21_0 for id 924e0f70d4462e0b6e4b8ec1da5bfce9baf9c751c9d79e01b5260d92bc456544: name is reserved',
    cause: 'NameReserved',
    runtime: 'cri-o',
  },
  {
    // https://github.com/kubernetes/minikube/issues/3142 (kubelet log, unescaped)
    name: 'dockershim pause image pull that timed out',
    message:
      'rpc error: code = Unknown desc = failed pulling image "gcr.io/google_containers/pause-amd64:3.0": Error response from daemon: Get https://gcr.io/v2/: net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)',
    cause: 'ImagePull',
    runtime: 'dockershim',
  },
  {
    // https://github.com/google/gvisor-containerd-shim/issues/46
    name: 'RuntimeHandler not supported',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = RuntimeHandler "runsc" not supported',
    cause: 'RuntimeHandler',
    runtime: 'dockershim',
  },
  {
    // https://github.com/containerd/cri/issues/699 (the newline is the message's own)
    name: 'containerd network status failure',
    message:
      'rpc error: code = 2 desc = failed to get network status for sandbox "fb58bf5ab96b7e1197616d5406eda1a5845b39adfc322f1efbd49d6e36472ef7": Unexpected command output Device "eth0" does not exist.\n with error: exit status 1',
    cause: 'Network',
    runtime: 'containerd',
  },
  {
    // cri-o's format (server/sandbox_network.go: "failed to get network status for pod sandbox %s(%s): %v") with the
    // names of the multus message below; no issue quotes it whole.
    name: 'cri-o network status failure timing out',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get network status for pod sandbox k8s_dns-default-8qwlc_openshift-dns_f7973944-55fb-4ab2-ad0d-facb3f1b418f_0(091f3eff85c7f292db501b0fdfa7b8d1a49d844ca40a45f9c3d7cb1896b652ef): context deadline exceeded',
    cause: 'Network',
    runtime: 'cri-o',
  },
  {
    // https://github.com/openshift/origin/pull/27020 (cut after "failed (add):")
    name: 'cri-o multus failure naming the network',
    message:
      'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to create pod network sandbox k8s_dns-default-8qwlc_openshift-dns_f7973944-55fb-4ab2-ad0d-facb3f1b418f_0(091f3eff85c7f292db501b0fdfa7b8d1a49d844ca40a45f9c3d7cb1896b652ef): error adding pod openshift-dns_dns-default-8qwlc to CNI network "multus-cni-network": plugin type="multus" name="multus-cni-network" failed (add):',
    cause: 'Network',
    runtime: 'cri-o',
  },
  {
    // https://github.com/microsoft/hcsshim/issues/2017 (its title)
    name: 'Windows compute system refused',
    message:
      'failed to create containerd task: failed to create shim task: hcs::CreateComputeSystem xxxxxxx--cid--xxxxxxxx : Access is denied.: unknown',
    cause: 'Other',
    runtime: 'windows',
  },
  {
    // The message that never tells: any runtime says it.
    name: 'bare deadline',
    message:
      'Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded',
    cause: 'DeadlineExceeded',
    runtime: undefined,
  },
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

  for (const { name, message, cause, runtime } of RUNTIME_CASES) {
    it(`classifies ${name} as ${cause}, in ${runtime ?? 'no runtime'}'s words`, () => {
      const result = classifyFailureMessage(message);
      expect(result.cause).to.equal(cause);
      expect(result.runtime).to.equal(runtime);
    });
  }

  it("parses cri-o's reserved pod name, but not its own request's id as the holder", () => {
    const result = classifyFailureMessage(RUNTIME_CASES[0]!.message);
    expect(result.name).to.deep.equal({
      raw: 'k8s_coredns-648f7fb587-vwgc5_kube-system_8b9d0873-39dc-4863-84e8-fbad3006d86a_0',
      pod: 'coredns-648f7fb587-vwgc5',
      namespace: 'kube-system',
      uid: '8b9d0873-39dc-4863-84e8-fbad3006d86a',
      attempt: 0,
    });
    // cri-o names the id of the request that failed ("for id"); every retry names another.
    expect(result.reservedFor).to.equal(undefined);
  });

  it("parses cri-o's reserved container name, the container first", () => {
    const result = classifyFailureMessage(RUNTIME_CASES[1]!.message);
    expect(result.name).to.include({
      container: 'minio',
      pod: 'data-analytics-prod-pool-0-3',
      namespace: 'oci-prod-data-analytics',
      attempt: 0,
    });
  });

  it("takes the holder from cri-o's conflict wording, and leaves a name with no pod uid unparsed", () => {
    const result = classifyFailureMessage(RUNTIME_CASES[3]!.message);
    expect(result.name).to.equal(undefined);
    expect(result.reservedFor).to.equal('806c14a58b59ee5c8ea28663386270d8ba43536fa8967f0602e8d30beaeecee6');
  });

  it("parses a static pod's name, whose uid is its manifest's hash", () => {
    // https://github.com/containerd/containerd/issues/9545 (kubelet log)
    const containerd = classifyFailureMessage(
      'rpc error: code = Unknown desc = failed to reserve container name \\"kube-apiserver_kube-apiserver-kiv-cp-v48fw_kube-system_37b2b42d18b011bd117353a3847450aa_1\\": name \\"kube-apiserver_kube-apiserver-kiv-cp-v48fw_kube-system_37b2b42d18b011bd117353a3847450aa_1\\" is reserved for \\"7c54f31e3fc8b87a115f11a214efe060c94e93ae822c9819a472bfb382c2839c\\"',
    );
    expect(containerd.name).to.include({
      container: 'kube-apiserver',
      pod: 'kube-apiserver-kiv-cp-v48fw',
      uid: '37b2b42d18b011bd117353a3847450aa',
    });
    expect(containerd.reservedFor).to.equal(
      '7c54f31e3fc8b87a115f11a214efe060c94e93ae822c9819a472bfb382c2839c',
    );
    // https://github.com/cri-o/cri-o/issues/3571 (its log)
    const crio = classifyFailureMessage(
      'Error reserving pod name k8s_kube-apiserver-master1_kube-system_2abe36c990c315f116840d96b89eb8a2_0 for id 437508876cf392821439da52786df1f4ac3af41ca2501205e46478be5ec8d32f: name is reserved',
    );
    expect(crio.name).to.include({ pod: 'kube-apiserver-master1', uid: '2abe36c990c315f116840d96b89eb8a2' });
  });

  it("reads containerd 2.x's wording, which goes on after the name", () => {
    // https://github.com/amazonlinux/amazon-linux-2023/issues/1097 (containerd 2.2.3) has <placeholders> for the name
    // and id; these are the container case's above.
    const name = 'app_web-0_shop_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_1';
    const result = classifyFailureMessage(
      `failed to reserve container name "${name}"; check if another CreateContainer request is in progress:\nname "${name}" is reserved for "${'0123456789abcdef'.repeat(4)}"`,
    );
    expect(result.name).to.include({ raw: name, container: 'app', pod: 'web-0' });
    expect(result.reservedFor).to.equal('0123456789abcdef'.repeat(4));
  });

  it('reads the holder across a line break and a log escape', () => {
    // https://github.com/kubernetes/kubernetes/issues/107561 (Windows kubelet log, wrapped where the issue wrapped it)
    const result = classifyFailureMessage(
      'rpc error: code = Unknown desc = failed to reserve sandbox name \\"iis-1809-5b4c4fbc9b-t55hd_default_ddc4e2a5-6229-4abd-9712-f18423f0f0a5_0\\": name \\"iis-1809-5b4c4fbc9b-t55hd_default_ddc4e2a5-6229-4abd-9712-f18423f0f0a5_0\\" is reserved for              \n\\"e41d37b94b4d6ba41796563fed96cb05548bde26570751408bdf447948a272eb\\"',
    );
    expect(result).to.deep.include({
      cause: 'NameReserved',
      runtime: 'containerd',
      reservedFor: 'e41d37b94b4d6ba41796563fed96cb05548bde26570751408bdf447948a272eb',
    });
    expect(result.name?.pod).to.equal('iis-1809-5b4c4fbc9b-t55hd');
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

describe('normaliseFailureMessage', () => {
  it('drops quotes with their escapes and makes every run of whitespace one space', () => {
    expect(normaliseFailureMessage(' a \\"b\\"\t\n c \'d\' "e"  ')).to.equal('a b c d e');
    expect(normaliseFailureMessage('keeps \\n and C:\\path')).to.equal('keeps \\n and C:\\path');
  });

  it('fills the head with what it keeps, so padding cannot push a phrase out', () => {
    const padded = `${' \t'.repeat(5000)}context ${'"'.repeat(5000)}deadline exceeded`;
    expect(normaliseFailureMessage(padded)).to.equal('context deadline exceeded');
    expect(classifyFailureMessage(padded).cause).to.equal('DeadlineExceeded');
  });
});

describe('parseCrioReservedName', () => {
  it("needs cri-o's k8s_ prefix", () => {
    expect(parseCrioReservedName('web-0_shop_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_1')).to.equal(undefined);
    expect(parseCrioReservedName('k8s_web-0_shop_0b1c6a52-3f0e-4c8e-9a43-0d6c2b8f4e11_1')).to.include({
      pod: 'web-0',
      namespace: 'shop',
    });
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
  it('accepts a creation error however it is wrapped or quoted', () => {
    expect(
      isSandboxFailureEvent({ ...base, reason: 'Failed', message: "Error: 'context\n   deadline exceeded'" }),
    ).to.equal(true);
  });
  it("accepts cri-o's Failed container-creation errors", () => {
    expect(
      isSandboxFailureEvent({
        ...base,
        reason: 'Failed',
        message: `Error: Kubelet may be retrying requests that are timing out in CRI-O due to system load: error reserving ctr name k8s_a_b_c_d_0 for id ${CRIO_ID}: name is reserved`,
      }),
    ).to.equal(true);
  });
  it("accepts the Event kubelet folds repeats into: '(combined from similar events): Error: ...'", () => {
    // https://github.com/kubernetes/kubernetes/issues/112105: the cri-o pod that keeps retrying.
    expect(
      isSandboxFailureEvent({
        ...base,
        reason: 'Failed',
        message:
          '(combined from similar events): Error: Kubelet may be retrying requests that are timing out in CRI-O due to system load: context deadline exceeded: error reserving ctr name k8s_minio_data-analytics-prod-pool-0-3_oci-prod-data-analytics_8dec4302-e6b4-4874-9a60-ea305b96347f_0 for id 8424e8fdc1a42daec5810b43a8baf7a9a80f7835a843fc104fe9f621a14983cb: name is reserved',
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
