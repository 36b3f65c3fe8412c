#!/usr/bin/env bash
# Stops or starts one component of the running local cluster, with the command line up.sh recorded:
#   hack/cluster/component.sh stop|kill|start|restart etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok
# For failure tests (e.g. the apiserver gone for 20 s). `kill` is kill -9: a crash, no graceful shutdown.
set -euo pipefail
LOG_TAG=component
. "$(dirname "$0")/lib.sh"
action=${1:-}; name=${2:-}
case $name in etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok) ;; *) die "usage: component.sh stop|kill|start|restart COMPONENT" ;; esac
[ -f "$CLUSTER_DIR/cmd/$name" ] || die "no recorded command for $name: is the cluster up (hack/cluster/up.sh)?"

stop_one() {
  alive "$name" || { log "$name is not running"; return 0; }
  local pid; pid=$(cat "$CLUSTER_DIR/pids/$name.pid")
  kill "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  log "stopped $name (pid $pid)"
}
kill_one() {
  alive "$name" || { log "$name is not running"; return 0; }
  local pid; pid=$(cat "$CLUSTER_DIR/pids/$name.pid")
  kill -9 "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  log "killed $name (kill -9, pid $pid)"
}
start_one() {
  alive "$name" && { log "$name is already running"; return 0; }
  eval "nohup $(cat "$CLUSTER_DIR/cmd/$name") >>'$CLUSTER_DIR/logs/$name.log' 2>&1 </dev/null &"
  echo $! >"$CLUSTER_DIR/pids/$name.pid"
  log "started $name (pid $!)"
  if [ "$name" = etcd ]; then
    . "$CLUSTER_DIR/env"
    wait_for "etcd /health" 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
  fi
  if [ "$name" = kube-apiserver ]; then wait_for "kube-apiserver /readyz" 120 kc get --raw=/readyz; fi
}
case $action in
  stop) stop_one ;;
  kill) kill_one ;;
  start) start_one ;;
  restart) stop_one; start_one ;;
  *) die "unknown action $action" ;;
esac
