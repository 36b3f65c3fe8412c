#!/usr/bin/env bash
# The embedded default scenario: a local simulated cluster, the sandbox incident on one node, the operator
# detecting it, kubectl get sandboxhealth, then recovery. Leaves the cluster running (make cluster-down).
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

step "1/6 Local cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok with 3 nodes"
NODES=3 "$here/up.sh"

step "2/6 CRDs and a SandboxPolicy (stuckThresholdSeconds: $THRESHOLD for the demo; the default is 180)"
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
POLICY

step "3/6 The operator and the node agent for $NODE (logs: .cluster/logs/operator.log, agent.log)"
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

step "4/6 The incident on $NODE: containerd cannot create sandboxes in time (failed to reserve sandbox name)"
"$here/incident" start --node "$NODE" --interval-seconds 5 --max-duration-seconds 900
k create deployment shop --image=registry.local/shop:1 --replicas=6 --dry-run=client -o yaml | k apply -f - >/dev/null
k rollout status deployment/shop --timeout=10s >/dev/null 2>&1 || true
show k get pods -o wide

step "5/6 Waiting ${THRESHOLD}s for the stuck pods to cross the threshold"
wait_for "SandboxCreationDegraded on $NODE" $((THRESHOLD + 60)) bash -c "[ \"\$('$KUBECTL' get sandboxhealth $NODE -o jsonpath='{.status.state}')\" = Degraded ]"
wait_for "the agent's reading on $NODE" 30 bash -c "[ -n \"\$('$KUBECTL' get sandboxhealth $NODE -o jsonpath='{.status.ioReading.source}')\" ]"
show k get sandboxhealth
show k get sandboxpolicies
show k get sandboxhealth "$NODE" -o jsonpath='{range .status.stuckPods[*]}{.namespace}/{.name}: {.cause} x{.failureCount}, reserved for {.reservedFor}{"\n"}{end}'
show k get events --field-selector "involvedObject.name=$NODE" -o custom-columns=TYPE:.type,REASON:.reason,FROM:.source.component,MESSAGE:.message

step "6/6 IO drops: the incident ends, the pods start, the node recovers"
"$here/incident" stop --node "$NODE"
wait_for "$NODE to recover" 60 bash -c "[ \"\$('$KUBECTL' get sandboxhealth $NODE -o jsonpath='{.status.state}')\" = Healthy ]"
show k get sandboxhealth
show k get pods -o wide

printf '\nThe cluster and the operator are still running: export KUBECONFIG=%s\nStop both with: make cluster-down\n' "$KUBECONFIG" >&2
