#!/usr/bin/env bash
# Starts a local control plane on 127.0.0.1: etcd, kube-apiserver (TLS, client certificates, RBAC),
# kube-controller-manager, kube-scheduler and kwok with NODES simulated nodes. Reuses a running one.
# Writes .cluster/kubeconfig; logs in .cluster/logs/, with the audit log of every change in .cluster/logs/audit.log
# (hack/cluster/audit-policy.yaml). Stop it with hack/cluster/down.sh. The lab (hack/lab/up.sh) runs one inside its
# own network namespace, where the apiserver also listens on the namespace's bridge for the pods
# (CLUSTER_BIND_ADDRESS, CLUSTER_ADVERTISE_ADDRESS, CLUSTER_EXTRA_SANS), and reaches the pods' webhook and the
# kubelet there directly (CLUSTER_NO_PROXY); everything else stays on 127.0.0.1.
set -euo pipefail
LOG_TAG=cluster-up
. "$(dirname "$0")/lib.sh"
NODES=${NODES:-3}
BIND_ADDRESS=${CLUSTER_BIND_ADDRESS:-127.0.0.1}
started=$(date +%s)

components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
# On failure, the end of every component's log on stderr: CI keeps only the output, not .cluster/logs/.
show_logs() {
  local status=$? file logs=()
  (( status == 0 )) && return
  for file in "$CLUSTER_DIR"/logs/*.log; do
    case $(basename "$file") in audit.log | pki.log) ;; *) [ -f "$file" ] && logs+=("$file") ;; esac
  done
  # Failed before any component started: the certificates' log is all there is.
  (( ${#logs[@]} > 0 )) || logs=("$CLUSTER_DIR/logs/pki.log")
  for file in "${logs[@]}"; do
    [ -f "$file" ] || continue
    log "the last lines of ${file#"$repo"/}:"
    tail -n 12 "$file" | sed 's/^/    /' >&2
  done
}
trap show_logs EXIT
running() { for c in "${components[@]}"; do alive "$c" || return 1; done; kc get --raw=/readyz >/dev/null 2>&1; }

if [ -f "$KUBECONFIG_FILE" ] && running; then
  log "reusing the running cluster ($KUBECONFIG_FILE)"
else
  if [ -d "$CLUSTER_DIR" ]; then log "found a stopped or partial cluster; cleaning it up first"; "$here/down.sh"; fi
  "$here/build.sh" etcd kubernetes kwok
  mkdir -p "$CLUSTER_DIR"/{pki,pids,logs,etcd,cmd}
  pki=$CLUSTER_DIR/pki

  log "creating certificates"
  (
    cd "$pki"
    exec 2>>"$CLUSTER_DIR/logs/pki.log" >&2
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -keyout ca.key -out ca.crt -subj "/CN=sandbox-remediator-local-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
    sign() {
      openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
      openssl x509 -req -sha256 -days 30 -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -extfile <(printf '%b' "$3")
      rm -f "$1.csr"
    }
    sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1${CLUSTER_EXTRA_SANS:+,$CLUSTER_EXTRA_SANS}"
    client="basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
    sign admin "/O=system:masters/CN=kubernetes-admin" "$client"
    sign kube-controller-manager "/CN=system:kube-controller-manager" "$client"
    sign kube-scheduler "/CN=system:kube-scheduler" "$client"
    sign kwok "/O=system:masters/CN=kwok" "$client"
    openssl genrsa -out sa.key 2048 && openssl rsa -in sa.key -pubout -out sa.pub
  )

  etcd_port=$(free_port); peer_port=$(free_port "$etcd_port"); api_port=$(free_port "$etcd_port" "$peer_port")
  kcm_port=$(free_port "$etcd_port" "$peer_port" "$api_port")
  sched_port=$(free_port "$etcd_port" "$peer_port" "$api_port" "$kcm_port")
  node_proxy_port=$(free_port "$etcd_port" "$peer_port" "$api_port" "$kcm_port" "$sched_port")
  cat > "$CLUSTER_DIR/env" <<ENV
ETCD_PORT=$etcd_port
API_PORT=$api_port
KCM_PORT=$kcm_port
SCHEDULER_PORT=$sched_port
NODE_PROXY_PORT=$node_proxy_port
ENV

  mkkubeconfig() { # file identity
    local k=$CLUSTER_DIR/$1
    "$KUBECTL" config set-cluster local --server="https://127.0.0.1:$api_port" --certificate-authority="$pki/ca.crt" --embed-certs --kubeconfig="$k" >/dev/null
    "$KUBECTL" config set-credentials "$2" --client-certificate="$pki/$2.crt" --client-key="$pki/$2.key" --embed-certs --kubeconfig="$k" >/dev/null
    "$KUBECTL" config set-context local --cluster=local --user="$2" --kubeconfig="$k" >/dev/null
    "$KUBECTL" config use-context local --kubeconfig="$k" >/dev/null
  }
  mkkubeconfig kubeconfig admin
  mkkubeconfig kcm.kubeconfig kube-controller-manager
  mkkubeconfig scheduler.kubeconfig kube-scheduler
  mkkubeconfig kwok.kubeconfig kwok

  start() { # name command...: records the command line so component.sh can restart it
    local name=$1; shift
    mkdir -p "$CLUSTER_DIR/cmd"
    printf '%q ' "$@" >"$CLUSTER_DIR/cmd/$name"
    log "starting $name"
    nohup "$@" >"$CLUSTER_DIR/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$CLUSTER_DIR/pids/$name.pid"
  }

  start etcd "$ETCD_BIN/etcd" --name=default --data-dir="$CLUSTER_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="default=http://127.0.0.1:$peer_port" --unsafe-no-fsync=true --log-level=warn --quota-backend-bytes=4294967296
  WAITING_ON=etcd wait_for "etcd /health" 60 curl -fsS "http://127.0.0.1:$etcd_port/health"

  # The apiserver refuses to proxy to a node whose address is not global unicast (kwok nodes are 127.0.0.1), so
  # a test of the real nodes/proxy path gives its node a documentation address (203.0.113.0/24) and serves an
  # HTTP CONNECT proxy on NODE_PROXY_PORT that leads it back to a kubelet stand-in on 127.0.0.1
  # (test/support/kubelet-proxy.ts). Loopback traffic (etcd, webhooks) never goes through a proxy; with nothing
  # listening there, any other proxied request fails at once.
  start kube-apiserver env HTTPS_PROXY="http://127.0.0.1:$node_proxy_port" NO_PROXY="127.0.0.1,localhost${CLUSTER_NO_PROXY:+,$CLUSTER_NO_PROXY}" \
    "$K8S_BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address="$BIND_ADDRESS" --secure-port="$api_port" \
    ${CLUSTER_ADVERTISE_ADDRESS:+--advertise-address="$CLUSTER_ADVERTISE_ADDRESS"} \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
    --authorization-mode=Node,RBAC --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 --allow-privileged=true --endpoint-reconciler-type=none \
    --cert-dir="$CLUSTER_DIR/apiserver" --event-ttl=1h --profiling=false --delete-collection-workers=4 \
    --audit-policy-file="$here/audit-policy.yaml" --audit-log-path="$CLUSTER_DIR/logs/audit.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=1
  WAITING_ON=kube-apiserver wait_for "kube-apiserver /readyz" 180 kc get --raw=/readyz

  # --node-monitor-grace-period=120s: one kwok process renews every simulated node's Lease, and in a storm on 1,000
  # nodes (bench/scale.ts) it falls behind on 2 cores; at 40 s nodes flapped NotReady, which real kubelets, one per
  # node, would not. No test relies on a node going NotReady by missed heartbeats. NODE_MONITOR_GRACE_PERIOD and
  # KWOK_NODE_LEASE_SECONDS (kwok renews each node's Lease about every quarter of it) are set higher for 5,000 nodes
  # (make bench-scale-5000): at 40 s, 5,000 leases are a few hundred writes a second on the same 2 cores.
  start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig="$CLUSTER_DIR/kcm.kubeconfig" --authentication-kubeconfig="$CLUSTER_DIR/kcm.kubeconfig" \
    --authorization-kubeconfig="$CLUSTER_DIR/kcm.kubeconfig" --bind-address=127.0.0.1 --secure-port="$kcm_port" \
    --leader-elect=false --use-service-account-credentials=true --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --controllers='*' --node-monitor-grace-period="${NODE_MONITOR_GRACE_PERIOD:-120s}" --profiling=false
  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" --authentication-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" --bind-address=127.0.0.1 --secure-port="$sched_port" \
    --leader-elect=false --profiling=false

  # kwok reads its Stages from the API (--enable-crds=Stage), so incidents can add and remove Stages at run time.
  kwok_src=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).Dir))')
  kc apply --server-side -f "$kwok_src/kustomize/crd/bases/kwok.x-k8s.io_stages.yaml" >/dev/null
  wait_for "the kwok Stage CRD" 60 kc get stages.kwok.x-k8s.io
  kc apply --server-side -f "$here/stages/" >/dev/null
  start kwok "$KWOK_BIN/kwok" --kubeconfig="$CLUSTER_DIR/kwok.kubeconfig" --enable-crds=Stage \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds="${KWOK_NODE_LEASE_SECONDS:-40}" --cidr=10.244.0.0/16 --node-ip=127.0.0.1
  wait_for "service account default/default" 120 kc get serviceaccount default -n default
fi

# Nodes are idempotent: apply creates what is missing.
for ((i = 0; i < NODES; i++)); do
  "$here/node.sh" create "kwok-node-$i" >/dev/null
done
wait_for "$NODES Ready node(s)" 120 bash -c "[ \"\$('$KUBECTL' --kubeconfig='$KUBECONFIG_FILE' get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}' | grep -c True)\" -ge $NODES ]"
# A component that died after its start (a port taken between the pick and its bind) would go unnoticed otherwise.
for c in "${components[@]}"; do alive "$c" || die "$c is not running; see ${CLUSTER_DIR}/logs/$c.log"; done
log "cluster up in $(( $(date +%s) - started ))s: export KUBECONFIG=$KUBECONFIG_FILE"
