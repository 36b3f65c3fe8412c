#!/usr/bin/env bash
# hack/lab/exec.sh CMD...: runs CMD in the lab's network namespace, against the lab's own control plane (KUBECONFIG
# and CLUSTER_DIR set): `hack/lab/exec.sh kubectl get pods -A`, helm, the lab's tests. Nothing else of this machine
# changes for CMD (nsenter keeps its mounts).
set -euo pipefail
LOG_TAG=lab-exec
. "$(dirname "$0")/lib.sh"
[ -e "/var/run/netns/$LAB_NETNS" ] || die "no lab is running (make lab)"
export KUBECONFIG=$KUBECONFIG_FILE
exec nsenter --net="/var/run/netns/$LAB_NETNS" "$@"
