# Shared helpers for hack/cluster scripts. Sourced, not run.
# shellcheck shell=bash
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

CLUSTER_DIR=${CLUSTER_DIR:-$repo/.cluster}
CACHE=${SANDBOX_REMEDIATOR_CACHE:-$HOME/.cache/sandbox-remediator}
BIN=$CACHE/bin
K8S_BIN=$BIN/kubernetes-v$KUBERNETES_VERSION
ETCD_BIN=$BIN/etcd-v$ETCD_VERSION
KWOK_BIN=$BIN/kwok-v$KWOK_VERSION
KUBECONFIG_FILE=$CLUSTER_DIR/kubeconfig

log() { printf '[%s %s] %s\n' "${LOG_TAG:-cluster}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# kubectl matching the apiserver: the one built beside it (make tools), else the machine's pinned 1.33 or kubectl.
resolve_kubectl() {
  if [ -n "${KUBECTL:-}" ]; then echo "$KUBECTL"; return; fi
  local real; real=$(readlink -f "$(command -v kubectl)" 2>/dev/null || true)
  for candidate in "$K8S_BIN/kubectl" "$(command -v kubectl.1.33 || true)" "${real:+$(dirname "$real")/kubectl.1.33}" "$(command -v kubectl || true)"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  die "kubectl not found"
}
KUBECTL=$(resolve_kubectl)
kc() { "$KUBECTL" --kubeconfig="$KUBECONFIG_FILE" "$@"; }

# wait_for LABEL TIMEOUT_SECONDS COMMAND...: retries COMMAND until it succeeds, printing progress every 5 s.
wait_for() {
  local label=$1 timeout=$2 start now last=0; shift 2
  start=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    now=$(date +%s)
    if (( now - start >= timeout )); then log "gave up waiting for $label after ${timeout}s"; return 1; fi
    if (( now - last >= 5 )); then log "waiting for $label ... $(( now - start ))s"; last=$now; fi
    sleep 0.5
  done
  log "$label ready after $(( $(date +%s) - start ))s"
}

# A free TCP port on 127.0.0.1.
free_port() { node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

# alive NAME: the recorded process is running and is still the binary we started (pids get reused).
alive() {
  local pidfile=$CLUSTER_DIR/pids/$1.pid pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$1"
}
