#!/usr/bin/env bash
# hack/lab/host.sh save|restore: what kubelet and containerd change outside LAB_DIR at fixed paths, put back as it
# was. `save` (before kubelet starts) records it under LAB_DIR/host; `restore` (after both stopped) undoes:
#   - kubelet's kernel tunables (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory, vm.panic_on_oom,
#     kernel.keys.root_maxkeys and root_maxbytes: it sets them when
#     protectKernelDefaults is false, and with it true it refuses to start on a machine whose values differ);
#   - kubelet's iptables chains (KUBE-FIREWALL with its INPUT/OUTPUT jumps, KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY),
#     removed only when they did not exist before;
#   - kubelet's device-plugin socket under /var/lib/kubelet, a path compiled into kubelet;
#   - containerd's CNI result cache in /var/lib/cni/results: the files of the lab's network, and the loopback
#     results of the same sandboxes;
#   - kubelet's QoS and pod cgroups (kubepods/...) in every cgroup hierarchy, removed only where there was none
#     before (once the lab's containers are gone, they are empty).
# Directories it made that are empty afterwards go too.
set -euo pipefail
LOG_TAG=lab-host
. "$(dirname "$0")/lib.sh"
saved=$LAB_DIR/host
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
CHAINS=("filter KUBE-FIREWALL" "filter KUBE-KUBELET-CANARY" "nat KUBE-KUBELET-CANARY" "mangle KUBE-KUBELET-CANARY" "mangle KUBE-IPTABLES-HINT")
DIRS=(/var/lib/kubelet /var/lib/kubelet/device-plugins /var/lib/cni /var/lib/cni/results)

has_chain() { "$1" -w 5 -t "$2" -S "$3" >/dev/null 2>&1; } # tool table chain (waiting for the xtables lock)

case ${1:-} in
  save)
    mkdir -p "$saved"
    for s in "${SYSCTLS[@]}"; do
      if v=$(sysctl -n "$s" 2>/dev/null); then echo "$s=$v"; fi
    done >"$saved/sysctl"
    : >"$saved/chains"
    for tool in iptables ip6tables; do
      command -v "$tool" >/dev/null || continue
      for c in "${CHAINS[@]}"; do
        # shellcheck disable=SC2086
        if has_chain "$tool" $c; then echo "$tool $c" >>"$saved/chains"; fi
      done
    done
    for h in /sys/fs/cgroup/*/; do
      if [ -d "${h}kubepods" ]; then echo "${h}kubepods"; fi
    done >"$saved/cgroups"
    : >"$saved/paths"
    for p in "${DIRS[@]}" /var/lib/kubelet/device-plugins/kubelet.sock; do
      if [ -e "$p" ]; then echo "$p" >>"$saved/paths"; fi
    done
    ;;
  restore)
    [ -d "$saved" ] || exit 0
    while IFS='=' read -r key value; do
      [ "$(sysctl -n "$key")" = "$value" ] || { sysctl -qw "$key=$value" && log "restored $key=$value"; }
    done <"$saved/sysctl"
    for tool in iptables ip6tables; do
      command -v "$tool" >/dev/null || continue
      for c in "${CHAINS[@]}"; do
        # shellcheck disable=SC2086
        set -- $c
        grep -qxF "$tool $1 $2" "$saved/chains" && continue # there before the lab: not ours
        has_chain "$tool" "$1" "$2" || continue
        if [ "$2" = KUBE-FIREWALL ]; then
          while "$tool" -w 5 -t "$1" -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
          while "$tool" -w 5 -t "$1" -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
        fi
        if "$tool" -w 5 -t "$1" -F "$2" && "$tool" -w 5 -t "$1" -X "$2"; then log "removed $tool $1 chain $2"; fi
      done
    done
    was() { grep -qxF "$1" "$saved/paths"; }
    sock=/var/lib/kubelet/device-plugins/kubelet.sock
    was "$sock" || rm -f "$sock"
    if [ -d /var/lib/cni/results ]; then
      for f in /var/lib/cni/results/sandbox-remediator-lab-*; do
        [ -e "$f" ] || continue
        id=${f#/var/lib/cni/results/sandbox-remediator-lab-}; id=${id%%-*}
        rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
      done
    fi
    removed=()
    for h in /sys/fs/cgroup/*/; do
      cg=${h}kubepods
      [ -d "$cg" ] && ! grep -qxF "$cg" "$saved/cgroups" 2>/dev/null || continue
      # Deepest first; a pod cgroup may take a moment to empty after its processes were killed.
      for _ in 1 2 3 4 5; do
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [ -d "$cg" ] || break
        sleep 1
      done
      if [ -d "$cg" ]; then log "left $cg: processes $(find "$cg" -name cgroup.procs -exec cat {} + | tr '\n' ' ')"; else removed+=("$(basename "$h")"); fi
    done
    if [ ${#removed[@]} -gt 0 ]; then log "removed kubelet's kubepods cgroups (${removed[*]})"; fi
    for ((i = ${#DIRS[@]} - 1; i >= 0; i--)); do
      d=${DIRS[$i]}
      was "$d" || rmdir "$d" 2>/dev/null || true
    done
    ;;
  *) die "usage: hack/lab/host.sh save|restore" ;;
esac
exit 0
