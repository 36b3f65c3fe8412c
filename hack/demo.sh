#!/usr/bin/env bash
# The embedded default scenario: a local simulated cluster, the sandbox incident on one node under real disk IO
# pressure (stress-ng on this machine, bounded), the operator proving it and remediating (cordon, evict the stuck
# pods elsewhere), kubectl get sandboxhealth, then recovery and undo. Leaves the cluster running (make cluster-down).
set -euo pipefail
LOG_TAG=demo
. "$(dirname "$0")/cluster/lib.sh"
cd "$repo"
step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }
show() { printf '$ %s\n' "$*" >&2; "$@"; }
export KUBECONFIG=$KUBECONFIG_FILE
k() { "$KUBECTL" "$@"; }
NODE=kwok-node-1
THRESHOLD=${THRESHOLD:-20}
LOAD_SECONDS=${LOAD_SECONDS:-120}
STRESS_DIR=$(mktemp -d)
stress_pid=""
cleanup() {
  [ -n "$stress_pid" ] && kill -INT "$stress_pid" 2>/dev/null || true
  rm -rf "$STRESS_DIR"
}
trap cleanup EXIT

step "1/7 Local cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok with 3 nodes"
NODES=3 "$here/up.sh"

step "2/7 CRDs and a SandboxPolicy (demo clocks: stuck after ${THRESHOLD}s, pressure after 5s; the defaults are 180s and 30s)"
k apply --server-side --force-conflicts -f crds/ >/dev/null
k wait --for=condition=Established crd/sandboxpolicies.sandbox.remediator.io crd/sandboxhealths.sandbox.remediator.io >/dev/null
k apply -f - <<POLICY
apiVersion: sandbox.remediator.io/v1alpha1
kind: SandboxPolicy
metadata:
  name: demo
spec:
  detection:
    stuckThresholdSeconds: $THRESHOLD
  ioPressure:
    sustainSeconds: 5
    recoverySeconds: 15
    # What stress-ng --io 4 --hdd 2 reaches on a small machine; the defaults (40% / 90%) suit production disks.
    thresholds: { psiSomeAvg10Percent: 20, diskBusyPercent: 60, psiFullAvg10Percent: 100, blockedProcesses: 10000 }
  safety:
    maxUnhealthyNodes: 1    # 20% of 3 nodes rounds down to 0: a small pool needs a count
    cooldownSeconds: 15
POLICY

step "3/7 The operator and the node agent for $NODE (logs: .cluster/logs/operator.log, agent.log)"
if [ -f "$CLUSTER_DIR/pids/operator.pid" ] && kill -0 "$(cat "$CLUSTER_DIR/pids/operator.pid")" 2>/dev/null; then
  log "operator already running"
else
  nohup node --import "$repo/node_modules/tsx/dist/esm/index.mjs" src/main.ts operator --kubeconfig "$KUBECONFIG" \
    --metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address 127.0.0.1:18081 \
    >"$CLUSTER_DIR/logs/operator.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/operator.pid"
fi
wait_for "operator /readyz" 60 curl -fsS http://127.0.0.1:18081/readyz
# The node agent for $NODE reads this machine's /proc: IO-PSI and DISK-BUSY in kubectl get sandboxhealth.
if ! { [ -f "$CLUSTER_DIR/pids/agent.pid" ] && kill -0 "$(cat "$CLUSTER_DIR/pids/agent.pid")" 2>/dev/null; }; then
  nohup node --import "$repo/node_modules/tsx/dist/esm/index.mjs" src/main.ts agent --node-name "$NODE" \
    --kubeconfig "$KUBECONFIG" --metrics-bind-address 127.0.0.1:18082 >"$CLUSTER_DIR/logs/agent.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/agent.pid"
fi

step "4/7 The incident on $NODE: containerd cannot create sandboxes in time (failed to reserve sandbox name)"
"$here/incident" start --node "$NODE" --interval-seconds 5 --max-duration-seconds 900
k create deployment shop --image=registry.local/shop:1 --replicas=6 --dry-run=client -o yaml | k apply -f - >/dev/null
k rollout status deployment/shop --timeout=10s >/dev/null 2>&1 || true
show k get pods -o wide

step "5/7 Waiting ${THRESHOLD}s for the stuck pods to cross the threshold: detected, not yet proven IO"
wait_for "SandboxCreationDegraded on $NODE" $((THRESHOLD + 60)) bash -c "[ \"\$('$KUBECTL' get sandboxhealth $NODE -o jsonpath='{.status.state}')\" = Degraded ]"
wait_for "the agent's reading on $NODE" 30 bash -c "[ -n \"\$('$KUBECTL' get sandboxhealth $NODE -o jsonpath='{.status.ioReading.source}')\" ]"
show k get sandboxhealth
show k get sandboxhealth "$NODE" -o jsonpath='{range .status.stuckPods[*]}{.namespace}/{.name}: {.cause} x{.failureCount}, reserved for {.reservedFor}{"\n"}{end}'
show k get sandboxhealth "$NODE" -o jsonpath='{range .status.conditions[?(@.type=="Cordoned")]}Cordoned={.status} {.reason}: {.message}{"\n"}{end}'

step "6/7 Real disk IO pressure on this machine (stress-ng --io 4 --hdd 2, stops by itself after ${LOAD_SECONDS}s): proven, remediated"
stress-ng --io 4 --hdd 2 --timeout "${LOAD_SECONDS}s" --temp-path "$STRESS_DIR" >/dev/null 2>&1 &
stress_pid=$!
wait_for "$NODE cordoned by the operator" 90 bash -c "[ \"\$('$KUBECTL' get node $NODE -o jsonpath='{.spec.unschedulable}')\" = true ]"
wait_for "the stuck pods evicted and replaced on other nodes" 60 bash -c "[ \"\$('$KUBECTL' get pods --field-selector spec.nodeName=$NODE,status.phase=Pending -o name | wc -l)\" = 0 ]"
k rollout status deployment/shop --timeout=60s >/dev/null 2>&1 || true
show k get sandboxhealth
show k get pods -o wide
show k get node "$NODE" -o jsonpath='{.metadata.annotations}{"\n"}'
show k get events --field-selector "source=sandbox-remediator,involvedObject.name=$NODE" -o custom-columns=REASON:.reason,MESSAGE:.message
show k get events --field-selector "reason=EvictedStuckPod" -o custom-columns=POD:.involvedObject.name,REASON:.reason,MESSAGE:.message

step "7/7 IO drops: the incident ends, the load stops; after recoverySeconds and cooldown the node is uncordoned"
"$here/incident" stop --node "$NODE"
kill -INT "$stress_pid" 2>/dev/null || true
wait "$stress_pid" 2>/dev/null || true
stress_pid=""
wait_for "$NODE uncordoned and healthy" 180 bash -c "[ -z \"\$('$KUBECTL' get node $NODE -o jsonpath='{.spec.unschedulable}')\" ] && [ \"\$('$KUBECTL' get sandboxhealth $NODE -o jsonpath='{.status.state}')\" = Healthy ]"
show k get sandboxhealth
show k get sandboxhealth "$NODE" -o jsonpath='{range .status.actions[*]}{.time} {.kind} {.target} {.outcome} ({.reason}){"\n"}{end}'

printf '\nThe cluster and the operator are still running: export KUBECONFIG=%s\nStop both with: make cluster-down\n' "$KUBECONFIG" >&2
