# Shared settings for hack/lab scripts: one real node (kubelet, containerd, runc, CNI bridge) beside the local
# control plane, everything under LAB_DIR. Sourced, not run.
# shellcheck shell=bash
lab_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_DIR=${LAB_DIR:-$(cd "$lab_here/../.." && pwd)/.lab}
# The lab's own control plane, inside the lab's network namespace (below), with its state beside the node's.
export CLUSTER_DIR=$LAB_DIR/cluster
# shellcheck source=../cluster/lib.sh
. "$lab_here/../cluster/lib.sh"

LAB_NODE=${LAB_NODE:-lab-node-1}
# kubelet gives RunPodSandbox twice this: short, so that a sandbox stalled on IO misses kubelet's deadline quickly.
LAB_RUNTIME_REQUEST_TIMEOUT=${LAB_RUNTIME_REQUEST_TIMEOUT:-2s}
# Everything the lab runs (its control plane, kubelet, containerd, the pods on their CNI bridge) talks inside a
# network namespace of its own: no address of this machine's is used but its loopback's inside it, and a pod reaches
# only the bridge's address, where the apiserver listens too (ADR 0028). No masquerading, no route out.
LAB_NETNS=${LAB_NETNS:-sandbox-remediator-lab}
LAB_BRIDGE=${LAB_BRIDGE:-sr-lab0}
LAB_SUBNET=${LAB_SUBNET:-10.213.250.0/24} # outside containerd's and podman's default 10.88.0.0/16
LAB_GATEWAY=${LAB_SUBNET%.*}.1             # the bridge's: the apiserver's, the Node's and the pods' gateway
LAB_SERVICE_IP=10.96.0.1                   # the kubernetes Service, routed to the apiserver in the namespace
LAB_PAUSE_IMAGE=sandbox-remediator.local/pause:lab
LAB_APP_IMAGE=sandbox-remediator.local/app:lab
LAB_WRITER_IMAGE=sandbox-remediator.local/writer:lab # the culprit mode's (hack/lab/writer)
KUBELET_BIN=$BIN/kubelet-v$KUBERNETES_VERSION/kubelet
# containerd's own blkio cgroup (cgroup v1): the deterministic stall throttles it on the lab disk's loop device.
LAB_BLKIO=/sys/fs/cgroup/blkio/sandbox-remediator-lab

LAB_SOCK=$LAB_DIR/run/containerd.sock
LAB_DISK=$LAB_DIR/disk
LAB_RUNC_ROOT=$LAB_DIR/run/runc

lab_ctr() { ctr --address "$LAB_SOCK" --namespace k8s.io "$@"; }

# lab_alive NAME [PATTERN]: prints the pid in LAB_DIR/pids/NAME.pid when that process still runs and its command line
# matches PATTERN (default: LAB_DIR), so it is still the one we started (pids get reused).
lab_alive() {
  local pidfile=$LAB_DIR/pids/$1.pid pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "${2:-$LAB_DIR}" && echo "$pid"
}

# lab_loop: the loop device that backs the lab's disk image, by the image (a recorded number may back something else
# after a reboot); empty when none.
lab_loop() { if [ -f "$LAB_DIR/disk.img" ]; then losetup -j "$LAB_DIR/disk.img" | cut -d: -f1 | head -n 1; fi; }

# in_lab_netns: whether this process runs in the lab's network namespace.
in_lab_netns() {
  [ -e "/var/run/netns/$LAB_NETNS" ] && [ "$(stat -L -c %i /proc/self/ns/net)" = "$(stat -L -c %i "/var/run/netns/$LAB_NETNS")" ]
}

# lab_netns_exec CMD...: runs CMD in the lab's network namespace, and in nothing else of its own: unlike
# `ip netns exec`, nsenter keeps this machine's mounts (the cgroup hierarchies under /sys among them).
lab_netns_exec() { nsenter --net="/var/run/netns/$LAB_NETNS" "$@"; }
