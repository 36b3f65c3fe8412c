# Shared settings for hack/lab scripts: one real node (kubelet, containerd, runc, CNI bridge) beside the local
# control plane, everything under LAB_DIR. Sourced, not run.
# shellcheck shell=bash
lab_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../cluster/lib.sh
. "$lab_here/../cluster/lib.sh"

LAB_DIR=${LAB_DIR:-$repo/.lab}
LAB_NODE=${LAB_NODE:-lab-node-1}
# kubelet gives RunPodSandbox twice this: short, so that a sandbox stalled on IO misses kubelet's deadline quickly.
LAB_RUNTIME_REQUEST_TIMEOUT=${LAB_RUNTIME_REQUEST_TIMEOUT:-2s}
# The CNI bridge stays on this machine: no gateway route off it and no masquerading.
LAB_BRIDGE=${LAB_BRIDGE:-sr-lab0}
LAB_SUBNET=${LAB_SUBNET:-10.213.250.0/24} # outside containerd's and podman's default 10.88.0.0/16
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
