/**
 * The medik8s node lease: NodeHealthCheck, node-maintenance-operator and self-node-remediation take Lease
 * `node-<node>` in this namespace before they touch a node. With safety.nodeLease the operator takes it too, as
 * holder `sandbox-remediator-<policy>`: the prefix is how a lease of ours is told from another's.
 */
export const MEDIK8S_LEASE_NAMESPACE = 'medik8s-leases';
export const NODE_LEASE_HOLDER_PREFIX = 'sandbox-remediator-';

export const nodeLeaseName = (node: string): string => `node-${node}`;
export const isOurNodeLeaseHolder = (holder: string | undefined): boolean =>
  holder !== undefined && holder.startsWith(NODE_LEASE_HOLDER_PREFIX);
