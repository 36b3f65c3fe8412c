#!/usr/bin/env bash
# `make lab-down`: stops the lab node and removes what it left on this machine, and only that: kubelet, the lab's
# containers (through its own runc root), shims and containerd by PID; mounts under LAB_DIR; the loop device; the
# bridge and the network namespaces holding lab addresses; kubelet's log links into LAB_DIR; the Node object.
# The control plane keeps running (make cluster-down stops it).
set -euo pipefail
LOG_TAG=lab-down
. "$(dirname "$0")/lib.sh"

stop_pid() { # name pid: TERM, then KILL after 10 s
  local name=$1 pid=$2
  kill -0 "$pid" 2>/dev/null || return 0
  log "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}
# Any incident first: the throttles, the load and its watchdog.
[ -f "$LAB_DIR/loopdev" ] && "$lab_here/incident.sh" stop 2>/dev/null || true
lab_alive kubelet && stop_pid kubelet "$(cat "$LAB_DIR/pids/kubelet.pid")"
# The containers, through the lab's own runc root (a system containerd's are elsewhere).
if [ -d "$LAB_RUNC_ROOT/k8s.io" ]; then
  for id in $(runc --root "$LAB_RUNC_ROOT/k8s.io" list -q 2>/dev/null); do
    runc --root "$LAB_RUNC_ROOT/k8s.io" kill -a "$id" KILL 2>/dev/null || true
    runc --root "$LAB_RUNC_ROOT/k8s.io" delete -f "$id" 2>/dev/null || true
  done
fi
# Shims started by the lab's containerd carry its socket in their command line.
for pid in $(pgrep -f "containerd-shim.*-address $LAB_SOCK" || true); do stop_pid containerd-shim "$pid"; done
lab_alive containerd && stop_pid containerd "$(cat "$LAB_DIR/pids/containerd.pid")"
# Shim sockets live in a fixed directory, named by sha256 of <containerd address>/<namespace>/<sandbox id>; a shim
# killed mid-start (containerd does that when kubelet gives up) leaves its socket behind. Removed: those of every id
# the lab's containerd logged, and any made since the lab started that no process listens on any more.
if [ -d /run/containerd/s ] && [ -f "$LAB_DIR/logs/containerd.log" ]; then
  for id in $(grep -oE '[0-9a-f]{64}' "$LAB_DIR/logs/containerd.log" | sort -u); do
    rm -f "/run/containerd/s/$(printf '%s' "$LAB_SOCK/k8s.io/$id" | sha256sum | cut -c1-64)"
  done
  if [ -f "$LAB_DIR/started" ]; then
    live=$(ss -xl 2>/dev/null | awk '{print $5}' | grep '^/run/containerd/s/' || true)
    find /run/containerd/s -maxdepth 1 -type s -newer "$LAB_DIR/started" | while read -r sock; do
      grep -qxF "$sock" <<<"$live" || rm -f "$sock"
    done
  fi
fi
loop=$(lab_loop)

# Network namespaces that hold a lab address, then the bridge.
if [ -d /var/run/netns ]; then
  prefix=${LAB_SUBNET%.*}.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    if ip netns exec "$ns" ip -4 -o addr 2>/dev/null | grep -qF " $prefix"; then ip netns delete "$ns" 2>/dev/null || true; fi
  done
fi
ip link show "$LAB_BRIDGE" >/dev/null 2>&1 && ip link delete "$LAB_BRIDGE"

# Mounts under LAB_DIR, deepest first, then the loop device.
if [ -d "$LAB_DIR" ]; then
  awk -v d="$LAB_DIR" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
fi
[ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
# kubelet links container logs from /var/log/containers (a fixed path): only the links into LAB_DIR.
if [ -d /var/log/containers ]; then
  for l in /var/log/containers/*.log; do
    [ -L "$l" ] && case $(readlink "$l") in "$LAB_DIR"/*) rm -f "$l" ;; esac
  done
fi
[ -d "$LAB_BLKIO" ] && { rmdir "$LAB_BLKIO" 2>/dev/null || log "left $LAB_BLKIO (processes still in it: $(tr '\n' ' ' <"$LAB_BLKIO/cgroup.procs"))"; }
if [ -f "$KUBECONFIG_FILE" ] && kc get --raw=/readyz >/dev/null 2>&1; then
  kc delete node "$LAB_NODE" --ignore-not-found --wait=false >/dev/null || true
fi
rm -rf "$LAB_DIR"
log "lab stopped and removed"
