// PURE: the shared node lease of medik8s' operators (NodeHealthCheck, node-maintenance-operator, self-node-remediation):
// a Lease named node-<node> in medik8s-leases, taken before they touch the node. Read as medik8s/common's lease manager
// (pkg/lease) reads it; what we do with it: hands off a node another holds, and (safety.nodeLease) hold it ourselves
// while we remediate (ADR 0022).

/** Where medik8s keeps its leases (its LEASE_NAMESPACE default). */
export const NODE_LEASE_NAMESPACE = 'medik8s-leases';
/** Every holder identity of ours starts so; the rest is the policy's name. */
export const HOLDER_PREFIX = 'sandbox-remediator-';
/** How long a lease we take lasts from its last renewal; it is renewed once half of it is left. */
export const LEASE_DURATION_SECONDS = 120;

/** medik8s names it after the lowercased kind and name. */
export const nodeLeaseName = (node: string): string => `node-${node}`.toLowerCase();
/** The node a lease in medik8s-leases is about, or undefined for one not named node-<node>. */
export const leaseNode = (name: string): string | undefined =>
  name.startsWith('node-') && name.length > 5 ? name.slice(5) : undefined;
/** The holder identity of a policy's leases. */
export const leaseHolder = (policy: string): string => `${HOLDER_PREFIX}${policy}`;
/** A holder identity of ours (some policy's), as opposed to medik8s' or anyone else's. */
export const isOurHolder = (holder: string | undefined): boolean =>
  holder?.startsWith(HOLDER_PREFIX) === true;

/** What the cache keeps of a node lease. */
export interface NodeLeaseView {
  node: string;
  uid: string;
  holder?: string;
  acquireTime?: Date;
  renewTime?: Date;
  durationSeconds?: number;
  transitions?: number;
}

/**
 * Until when the lease holds: renewTime + leaseDurationSeconds; undefined when either is missing (medik8s takes such a
 * lease as invalid, free to take). Unlike medik8s' isValidLease, a renewTime ahead of our clock still holds until then
 * rather than counting as invalid: a holder whose clock runs ahead is still a holder, and hands off is the safe reading.
 */
export function heldUntil(lease: NodeLeaseView | undefined): Date | undefined {
  if (lease?.renewTime === undefined || lease.durationSeconds === undefined) return undefined;
  return new Date(lease.renewTime.getTime() + lease.durationSeconds * 1000);
}

/** Held now (by anyone, a lease with no holder named too, as medik8s refuses to take one): due time not past. */
export function isHeld(lease: NodeLeaseView | undefined, now: Date): boolean {
  const until = heldUntil(lease);
  return until !== undefined && until.getTime() >= now.getTime();
}

/** Held now by another holder than `holder`: hands off the node. */
export function isHeldByOther(lease: NodeLeaseView | undefined, holder: string, now: Date): boolean {
  return lease !== undefined && lease.holder !== holder && isHeld(lease, now);
}

/** The holder in words: medik8s' own word for a lease held by nobody named. */
export const holderName = (lease: NodeLeaseView): string => lease.holder || 'unknown';

/** What to do about one node's lease now. */
export type LeaseStep =
  /** No lease: create it, ours. */
  | { kind: 'Take' }
  /** Ours, or expired (anyone's): update it to ours with a fresh renewTime; a takeover counts a transition. */
  | { kind: 'Renew'; takeover: boolean }
  /** Ours, and no longer wanted: delete it (medik8s' InvalidateLease). */
  | { kind: 'Release' }
  /** Nothing now; look again at `recheckAt` (a renewal due, an expiry), if anything is to happen by time alone. */
  | { kind: 'Wait'; recheckAt?: Date };

/**
 * What the operator wants of a node's lease. Hold: the node carries our stamps and its policy takes the lease. Keep: a
 * lease of ours is renewed but nothing is taken or released (the policy is invalid, so its changes are frozen; or a
 * fence of ours is being written). None: no lease of ours belongs on the node.
 */
export type LeaseWant = { kind: 'Hold'; holder: string } | { kind: 'Keep' } | { kind: 'None' };

/** When a lease we hold is renewed: once half of its duration is left. */
export function renewAt(lease: NodeLeaseView): Date | undefined {
  const until = heldUntil(lease);
  if (!until || lease.durationSeconds === undefined) return undefined;
  return new Date(until.getTime() - (lease.durationSeconds * 1000) / 2);
}

/** Whether a lease we hold is due for renewal now (or lacks what would say when). */
const dueForRenewal = (lease: NodeLeaseView, now: Date): boolean =>
  (renewAt(lease)?.getTime() ?? -Infinity) <= now.getTime();

/**
 * Decides a node's lease step. Never takes over a lease another holder holds (only an expired one, as medik8s
 * does), never releases one that is not ours, and renews ours before another could count it expired.
 */
export function decideLease(lease: NodeLeaseView | undefined, want: LeaseWant, now: Date): LeaseStep {
  const ours = lease !== undefined && isOurHolder(lease.holder);
  if (want.kind !== 'Hold') {
    if (!ours) return { kind: 'Wait' };
    if (want.kind === 'None') return { kind: 'Release' };
    return dueForRenewal(lease, now) ? { kind: 'Renew', takeover: false } : waitFor(lease);
  }
  if (!lease) return { kind: 'Take' };
  if (lease.holder === want.holder)
    return dueForRenewal(lease, now) ? { kind: 'Renew', takeover: false } : waitFor(lease);
  // Another policy of ours holds it: that policy's lease, given back when it no longer needs it (it is ours to let go).
  if (ours) return { kind: 'Release' };
  if (isHeld(lease, now)) return waitFor(lease, true);
  return { kind: 'Renew', takeover: true };
}

/** Waits for the renewal of ours, or the expiry of another's (+1 ms: expired means past). */
function waitFor(lease: NodeLeaseView, theirs = false): LeaseStep {
  const at = theirs ? heldUntil(lease) : renewAt(lease);
  return at ? { kind: 'Wait', recheckAt: new Date(at.getTime() + (theirs ? 1 : 0)) } : { kind: 'Wait' };
}

/** The lease's fields once `holder` takes or renews it now, as medik8s' RequestLease writes them. */
export interface LeaseFields {
  holder: string;
  durationSeconds: number;
  acquireTime: Date;
  renewTime: Date;
  transitions: number;
}

/**
 * A new lease starts with no transitions; a takeover (another holder's, expired) gets a new acquireTime and one more
 * transition; a renewal of ours keeps its acquireTime (setting one only where it had none).
 */
export function leaseFields(lease: NodeLeaseView | undefined, holder: string, now: Date): LeaseFields {
  const fields = { holder, durationSeconds: LEASE_DURATION_SECONDS, renewTime: now };
  if (!lease) return { ...fields, acquireTime: now, transitions: 0 };
  if (lease.holder !== holder)
    return { ...fields, acquireTime: now, transitions: (lease.transitions ?? 0) + 1 };
  return { ...fields, acquireTime: lease.acquireTime ?? now, transitions: lease.transitions ?? 0 };
}
