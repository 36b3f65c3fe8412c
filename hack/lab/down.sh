#!/usr/bin/env bash
# `make lab-down`: stops the lab node and removes what it left on this machine, and only that: kubelet, the lab's
# containers (through its own runc root), shims and containerd by PID; mounts under LAB_DIR; the loop device; the
# bridge and the network namespaces holding lab addresses; kubelet's log links into LAB_DIR; the Node object.
# Then the lab's own control plane, and last its network namespace (from outside it; called from inside, by make lab
# for a partial lab, it is kept).
set -euo pipefail
LOG_TAG=lab-down
. "$(dirname "$0")/lib.sh"
if ! in_lab_netns && [ -e "/var/run/netns/$LAB_NETNS" ]; then
  lab_netns_exec "$0" "$@"
  ip netns delete "$LAB_NETNS"
  log "removed the network namespace $LAB_NETNS"
  exit 0
fi

stop_pid() { # name pid: TERM, then KILL after 10 s
  local name=$1 pid=$2
  kill -0 "$pid" 2>/dev/null || return 0
  log "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}
# Any incident first: the throttles, the load and its watchdog.
if [ -n "$(lab_loop)" ]; then "$lab_here/incident.sh" stop || log "could not end the incident: check the blkio throttles"; fi
if pid=$(lab_alive kubelet); then stop_pid kubelet "$pid"; fi
# The containers, through the lab's own runc root (a system containerd's are elsewhere); first the network
# namespaces their specs name, to delete after.
netns=()
if [ -d "$LAB_RUNC_ROOT/k8s.io" ]; then
  for id in $(runc --root "$LAB_RUNC_ROOT/k8s.io" list -q 2>/dev/null); do
    bundle=$(runc --root "$LAB_RUNC_ROOT/k8s.io" state "$id" 2>/dev/null | sed -n 's/.*"bundle": *"\([^"]*\)".*/\1/p') || continue
    [ -n "$bundle" ] && [ -f "$bundle/config.json" ] &&
      mapfile -t -O "${#netns[@]}" netns < <(grep -o '/var/run/netns/cni-[0-9a-f-]*' "$bundle/config.json" | sort -u)
  done
  for id in $(runc --root "$LAB_RUNC_ROOT/k8s.io" list -q 2>/dev/null); do
    runc --root "$LAB_RUNC_ROOT/k8s.io" kill -a "$id" KILL 2>/dev/null || true
    runc --root "$LAB_RUNC_ROOT/k8s.io" delete -f "$id" 2>/dev/null || true
  done
fi
# Shims started by the lab's containerd carry its socket in their command line.
for pid in $(pgrep -f "containerd-shim.*-address $LAB_SOCK" || true); do stop_pid containerd-shim "$pid"; done
if pid=$(lab_alive containerd); then stop_pid containerd "$pid"; fi
# Shim sockets live in a fixed directory, named by sha256 of <containerd address>/<namespace>/<sandbox id>; a shim
# killed mid-start (containerd does that when kubelet gives up) leaves its socket behind. Removed: those of every id
# the lab's containerd logged; and, when no other containerd or shim runs on this machine (so no live socket can be
# another's), any made since the lab started that nothing listens on.
if [ -d /run/containerd/s ] && [ -f "$LAB_DIR/logs/containerd.log" ]; then
  for id in $(grep -oE '[0-9a-f]{64}' "$LAB_DIR/logs/containerd.log" | sort -u); do
    rm -f "/run/containerd/s/$(printf '%s' "$LAB_SOCK/k8s.io/$id" | sha256sum | cut -c1-64)"
  done
  if [ -f "$LAB_DIR/started" ] && ! pgrep -x containerd >/dev/null && ! pgrep -f containerd-shim >/dev/null &&
    listening=$(ss -xl); then
    live=$(awk '{print $5}' <<<"$listening" | grep '^/run/containerd/s/' || true)
    find /run/containerd/s -maxdepth 1 -type s -newer "$LAB_DIR/started" | while read -r sock; do
      grep -qxF "$sock" <<<"$live" || rm -f "$sock"
    done || true
  fi
fi
"$lab_here/host.sh" restore || log "could not put everything back outside $LAB_DIR (see above)"

# Network namespaces: those the lab's containers named, and any other holding a lab address; then the bridge.
for ns in "${netns[@]}"; do ip netns delete "$(basename "$ns")" 2>/dev/null || true; done
if [ -d /var/run/netns ]; then
  prefix=${LAB_SUBNET%.*}.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    if ip netns exec "$ns" ip -4 -o addr 2>/dev/null | grep -qF " $prefix"; then ip netns delete "$ns" 2>/dev/null || true; fi
  done
fi
if ip link show "$LAB_BRIDGE" >/dev/null 2>&1; then ip link delete "$LAB_BRIDGE" || true; fi

# Mounts under LAB_DIR, deepest first, then the loop device.
if [ -d "$LAB_DIR" ]; then
  awk -v d="$LAB_DIR" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
fi
# The loop device that backs the lab's own image (a recorded number may back something else after a reboot).
if [ -f "$LAB_DIR/disk.img" ]; then
  for dev in $(losetup -j "$LAB_DIR/disk.img" | cut -d: -f1); do losetup -d "$dev" 2>/dev/null || true; done
fi
# kubelet links container logs from /var/log/containers (a fixed path): only the links into LAB_DIR.
if [ -d /var/log/containers ]; then
  for l in /var/log/containers/*.log; do
    if [ -L "$l" ]; then case $(readlink "$l") in "$LAB_DIR"/*) rm -f "$l" ;; esac; fi
  done
fi
[ -d "$LAB_BLKIO" ] && { rmdir "$LAB_BLKIO" 2>/dev/null || log "left $LAB_BLKIO (processes still in it: $(tr '\n' ' ' <"$LAB_BLKIO/cgroup.procs"))"; }
if [ -f "$KUBECONFIG_FILE" ] && kc get --raw=/readyz >/dev/null 2>&1; then
  kc delete node "$LAB_NODE" --ignore-not-found --wait=false >/dev/null || true
fi
if [ -d "$CLUSTER_DIR" ]; then "$here/down.sh"; fi # the lab's control plane
rm -rf --one-file-system "$LAB_DIR"
log "lab stopped and removed"
