import type { SandboxHealthStatus, SandboxPolicyStatus } from '../../api/v1alpha1/index.js';
import type { ClusterCache, PolicyObject } from '../../ports/cluster.js';
import { isAtLeast, type Expectations } from '../../runtime/expectations.js';
import { stored } from '../../status/merge-patch.js';

/**
 * The operator's own status writes that the watch has not shown yet, as the API returned them. Only this operator
 * writes the policy status and the SandboxHealth's detection and remediation, so what it wrote is what the API holds,
 * and a pass reads that (client-go's mutation cache) rather than wait for the watch: in an incident both are written at almost every pass, and
 * waiting for each echo would put a watch round trip between one stuck pod's report and the next. Each lasts until the
 * cache shows that version or a newer one, not for a time: a watch lagging in a storm must not bring back an older
 * eviction log, nor a node's older status (its Events repeated, its `since` reset).
 *
 * - The policy status: kept here, by policy and its UID (a policy made again under the name reads its own), until the
 *   cache shows it or the policy is deleted.
 * - A SandboxHealth's status: kept here, by node, until the cache shows it or the object is deleted.
 */
export class MutationCache {
  private readonly healths = new Map<string, { status: SandboxHealthStatus; version: string }>();
  private readonly policies = new Map<
    string,
    { uid: string; status: SandboxPolicyStatus; version: string }
  >();

  constructor(
    private readonly cache: Pick<ClusterCache, 'observedVersion'>,
    private readonly expectations: Expectations,
  ) {}

  /**
   * The status a pass reads for a policy: ours while the cache has not shown our last write of it, the cached one
   * after. A write that came back with no version is not cached (the policy was deleted meanwhile). Dropped
   * where the version is learnt (the watch's event, or the write's answer), so a pass compares nothing.
   */
  policyStatus(policy: PolicyObject): SandboxPolicyStatus | undefined {
    const written = this.policies.get(policy.name);
    return written?.uid === policy.uid ? written.status : policy.status;
  }

  /** The cache shows this version of the policy now: a write of ours it includes is observed, and dropped. */
  policyObserved(name: string, observed: string | undefined): void {
    const written = this.policies.get(name);
    if (written && observed !== undefined && isAtLeast(observed, written.version)) this.policies.delete(name);
  }

  /** The policy is gone: nothing of it is cached. */
  forgetPolicy(name: string): void {
    this.policies.delete(name);
  }

  /** We merge-patched a policy's status: the API now holds what it held with `patch` over it. */
  wrotePolicyStatus(
    policy: { name: string; uid: string },
    version: string | undefined,
    before: SandboxPolicyStatus | undefined,
    patch: Partial<SandboxPolicyStatus>,
  ): void {
    // No version (the policy is gone, or none came back): nothing to cache.
    const { name, uid } = policy;
    if (version === undefined) {
      this.policies.delete(name);
      return;
    }
    const written = this.policies.get(name);
    const last = written?.uid === uid ? written.status : before;
    this.policies.set(name, { uid, status: stored({ ...last, ...patch }), version });
    // The watch may have shown the write before its answer came: its event found nothing to drop then.
    this.policyObserved(name, this.cache.observedVersion('SandboxPolicy', name));
  }

  /**
   * What a node's SandboxHealth status is: ours while the cache lags behind our write (undefined once it shows it:
   * read the cache); null when a write of ours is awaited with nothing cached for it (wait for the watch).
   */
  health(node: string): SandboxHealthStatus | undefined | null {
    const cached = this.cache.observedVersion('SandboxHealth', node);
    const written = this.healths.get(node);
    if (written) {
      if (!(cached !== undefined && isAtLeast(cached, written.version))) return written.status;
      this.healths.delete(node);
    }
    return this.expectations.isSettled(`SandboxHealth/${node}`, cached) ? undefined : null;
  }

  /** We wrote a node's SandboxHealth status; the API answered with this version and status. */
  wroteHealth(node: string, version: string | undefined, status: SandboxHealthStatus | undefined): void {
    this.expectations.expect(`SandboxHealth/${node}`, version);
    if (version !== undefined && status) this.healths.set(node, { status, version });
    else this.healths.delete(node);
  }

  /** The SandboxHealth was deleted: our write of it is moot, and will never show. */
  forgetHealth(node: string): void {
    this.healths.delete(node);
    this.expectations.forget(`SandboxHealth/${node}`);
  }
}
