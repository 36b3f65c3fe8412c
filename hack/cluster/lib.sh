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

# wait_for LABEL TIMEOUT_SECONDS COMMAND...: retries COMMAND until it succeeds, printing progress every 5 s. With
# WAITING_ON=NAME, gives up once the process up.sh started as NAME is seen gone twice in a row (once could be the
# moment between its fork and its exec, when its command line is still the shell's).
wait_for() {
  local label=$1 timeout=$2 start now last=0 gone=0; shift 2
  start=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    now=$(date +%s)
    if [ -n "${WAITING_ON:-}" ] && ! alive "$WAITING_ON"; then gone=$((gone + 1)); else gone=0; fi
    if (( gone >= 2 )); then log "$WAITING_ON exited while waiting for $label"; return 1; fi
    if (( now - start >= timeout )); then log "gave up waiting for $label after ${timeout}s"; return 1; fi
    if (( now - last >= 5 )); then log "waiting for $label ... $(( now - start ))s"; last=$now; fi
    sleep 0.5
  done
  log "$label ready after $(( $(date +%s) - start ))s"
}

# free_port [TAKEN...]: a free TCP port on 127.0.0.1, none of TAKEN, drawn at random below the kernel's ephemeral
# range. A port the kernel hands out for listen(0) comes from that range, the one every outgoing connection takes
# its source port from: between our pick and the server's bind, another cluster starting beside this one (make
# test-integration runs two) could take it for a connection, and the server would fail to bind.
free_port() {
  node -e '
    const net = require("net");
    const fs = require("fs");
    const taken = new Set(process.argv.slice(1).map(Number));
    let low = 32768;
    try { low = Number(fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || low; } catch {}
    const lowest = 10000, highest = Math.max(lowest + 1000, low) - 1;
    const attempt = (left) => {
      if (left === 0) { console.error("free_port: no free port in " + lowest + "-" + highest); process.exit(1); }
      const port = lowest + Math.floor(Math.random() * (highest - lowest + 1));
      if (taken.has(port)) return attempt(left - 1);
      const server = net.createServer();
      server.once("error", () => attempt(left - 1));
      server.listen(port, "127.0.0.1", () => server.close(() => console.log(port)));
    };
    attempt(200);
  ' -- "$@"
}

# alive NAME: the recorded process is running and is still the binary we started (pids get reused).
alive() {
  local pidfile=$CLUSTER_DIR/pids/$1.pid pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$1"
}
