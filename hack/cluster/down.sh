#!/usr/bin/env bash
# Stops exactly the processes hack/cluster/up.sh started (by recorded pid, checked against their command
# line) and removes the cluster state.
set -euo pipefail
LOG_TAG=cluster-down
. "$(dirname "$0")/lib.sh"
[ -d "$CLUSTER_DIR" ] || { log "no cluster at $CLUSTER_DIR"; exit 0; }
# The demo's operator and incident daemons first, then the control plane in reverse start order.
for pidfile in "$CLUSTER_DIR"/pids/operator.pid "$CLUSTER_DIR"/pids/agent.pid "$CLUSTER_DIR"/pids/incident-*.pid; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile"); kill "$pid" 2>/dev/null && log "stopped $(basename "$pidfile" .pid) (pid $pid)" || true
done
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  if alive "$name"; then
    pid=$(cat "$CLUSTER_DIR/pids/$name.pid")
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
done
rm -rf "$CLUSTER_DIR"
log "removed $CLUSTER_DIR"
