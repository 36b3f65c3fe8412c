#!/usr/bin/env bash
# `make lab`: one real node and a control plane of its own, inside a network namespace of its own (LAB_NETNS).
# kubelet (built from the control plane's Kubernetes module), Debian's containerd and runc, and a CNI bridge, all
# isolated under LAB_DIR (.lab/): state, sockets, a containerd config of its own, and containerd's root on a
# loop-mounted disk image whose IO can be throttled (hack/lab/incident.sh). The control plane (hack/cluster/up.sh,
# LAB_DIR/cluster) listens on the namespace's loopback and, for the pods, on the bridge's address, where the
# kubernetes Service is routed; nothing the lab runs sends to any other address (ADR 0028). Images are built here
# (hack/lab/image.sh); nothing is pulled. Ends with a pod Running on the node. Reuses a running lab. Needs root,
# cgroup v1 (blkio) and a free loop device. Run what talks to it with hack/lab/exec.sh (make test-lab does).
set -euo pipefail
LOG_TAG=lab-up
. "$(dirname "$0")/lib.sh"
started=$(date +%s)

[ "$(id -u)" = 0 ] || die "the lab runs kubelet and containerd, which need root"

# Tools: Debian packages (containerd, runc, CNI plugins, and what the disk and network need) and kubelet.
declare -A wanted=([containerd]=containerd [runc]=runc [ctr]=containerd [losetup]=mount [mkfs.ext4]=e2fsprogs [ip]=iproute2 [stress-ng]=stress-ng [iptables]=iptables [nsenter]=util-linux)
missing=()
for cmd in "${!wanted[@]}"; do command -v "$cmd" >/dev/null || missing+=("${wanted[$cmd]}"); done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them by hand"
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$here/build.sh" kubelet
[ -d "$LAB_BLKIO" ] || [ -d /sys/fs/cgroup/blkio ] || die "no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio: the lab's IO stall needs it"

# The network namespace, with its loopback up; the rest of this script runs inside it.
if ! in_lab_netns; then
  [ -e "/var/run/netns/$LAB_NETNS" ] || { ip netns add "$LAB_NETNS" && log "made the network namespace $LAB_NETNS"; }
  ip -n "$LAB_NETNS" link set lo up
  exec nsenter --net="/var/run/netns/$LAB_NETNS" "$0" "$@"
fi

# Images: a static pause binary as the sandbox image and as the app image, and the culprit mode's writer. Imported
# again into a running lab too (idempotent), which an older checkout may have started without one.
import_images() {
  local name
  for name in pause writer; do
    (cd "$lab_here/$name" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS= go build -trimpath -ldflags='-s -w' -o "$LAB_DIR/images/$name" main.go)
  done
  cp "$LAB_DIR/images/pause" "$LAB_DIR/images/app"
  "$lab_here/image.sh" "$LAB_PAUSE_IMAGE" "$LAB_DIR/images/pause" "$LAB_DIR/images/pause.tar"
  "$lab_here/image.sh" "$LAB_APP_IMAGE" "$LAB_DIR/images/app" "$LAB_DIR/images/app.tar"
  "$lab_here/image.sh" "$LAB_WRITER_IMAGE" "$LAB_DIR/images/writer" "$LAB_DIR/images/writer.tar"
  for name in pause app writer; do lab_ctr images import "$LAB_DIR/images/$name.tar" >/dev/null; done
  log "imported $LAB_PAUSE_IMAGE, $LAB_APP_IMAGE and $LAB_WRITER_IMAGE"
}

if lab_alive kubelet >/dev/null && lab_alive containerd >/dev/null && kc get node "$LAB_NODE" >/dev/null 2>&1; then
  import_images
  log "reusing the running lab ($LAB_DIR, node $LAB_NODE)"
  exit 0
fi
if [ -d "$LAB_DIR" ]; then log "found a stopped or partial lab; cleaning it up first"; "$lab_here/down.sh"; fi
# Another kubelet on this machine would lose its device plugins: kubelet empties /var/lib/kubelet/device-plugins (a
# path compiled into it) as it starts.
if pgrep -x kubelet >/dev/null || [ -e /var/lib/kubelet/device-plugins/kubelet.sock ]; then
  die "a kubelet already runs on this machine (or left /var/lib/kubelet/device-plugins/kubelet.sock): the lab's would clear its device plugins; run the lab on a machine without one"
fi
# The bridge, with the lab's one address: the pods' gateway, where the apiserver is reached and the Node's address.
ip link show "$LAB_BRIDGE" >/dev/null 2>&1 || ip link add "$LAB_BRIDGE" type bridge
ip addr replace "$LAB_GATEWAY/${LAB_SUBNET#*/}" dev "$LAB_BRIDGE"
ip link set "$LAB_BRIDGE" up
# The control plane: the apiserver on the namespace's addresses only, the bridge's included.
CLUSTER_BIND_ADDRESS=0.0.0.0 CLUSTER_ADVERTISE_ADDRESS=$LAB_GATEWAY CLUSTER_EXTRA_SANS=IP:$LAB_GATEWAY CLUSTER_NO_PROXY=$LAB_SUBNET \
  NODES=${LAB_KWOK_NODES:-2} "$here/up.sh"
# The kubernetes Service, as kube-proxy would route it: the one Service a pod of ours needs (in-cluster config).
. "$CLUSTER_DIR/env"
iptables -w 5 -t nat -N SR-LAB-SERVICES 2>/dev/null || iptables -w 5 -t nat -F SR-LAB-SERVICES
iptables -w 5 -t nat -A SR-LAB-SERVICES -d "$LAB_SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$LAB_GATEWAY:$API_PORT"
for chain in PREROUTING OUTPUT; do
  iptables -w 5 -t nat -C "$chain" -j SR-LAB-SERVICES 2>/dev/null || iptables -w 5 -t nat -A "$chain" -j SR-LAB-SERVICES
done

mkdir -p "$LAB_DIR"/{pids,logs,run,cni/net.d,cni/bin,cni/ipam,images,kubelet,pki}
touch "$LAB_DIR/started" # make lab-down removes the dead shim sockets made after this
"$lab_here/host.sh" save # what kubelet and containerd change at fixed paths, for make lab-down to put back

# A disk of its own for containerd's root and state: a sparse ext4 image on a loop device.
truncate -s 4G "$LAB_DIR/disk.img"
mkfs.ext4 -q -F "$LAB_DIR/disk.img"
loop=$(losetup --find --show "$LAB_DIR/disk.img") || die "no free loop device (losetup --find failed)"
mkdir -p "$LAB_DISK" && mount "$loop" "$LAB_DISK"
log "containerd's disk: $LAB_DIR/disk.img on $loop ($(cat "/sys/class/block/$(basename "$loop")/dev"))"

# CNI: Debian's plugins, plus lab-bridge, a bridge that waits LAB_DIR/cni/delay-seconds on ADD first (0 unless a
# test sets it: the cancellable delay, which gives kubelet's "context deadline exceeded" and nothing more).
for p in /usr/lib/cni/*; do ln -sf "$p" "$LAB_DIR/cni/bin/"; done
echo 0 >"$LAB_DIR/cni/delay-seconds"
cat >"$LAB_DIR/cni/bin/lab-bridge" <<SH
#!/bin/sh
[ "\$CNI_COMMAND" = ADD ] && sleep "\$(cat '$LAB_DIR/cni/delay-seconds' 2>/dev/null || echo 0)"
exec /usr/lib/cni/bridge
SH
chmod +x "$LAB_DIR/cni/bin/lab-bridge"
cat >"$LAB_DIR/cni/net.d/10-lab.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "sandbox-remediator-lab",
  "plugins": [
    {
      "type": "lab-bridge",
      "bridge": "$LAB_BRIDGE",
      "isDefaultGateway": true,
      "ipMasq": false,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$LAB_SUBNET" }]], "dataDir": "$LAB_DIR/cni/ipam" }
    },
    { "type": "loopback" }
  ]
}
JSON

# containerd: a second, isolated instance. restrict_oom_score_adj: root here may lack CAP_SYS_RESOURCE, and runc
# then cannot lower the sandbox's oom_score_adj.
cat >"$LAB_DIR/containerd.toml" <<TOML
version = 2
root = "$LAB_DISK/root"
state = "$LAB_DISK/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$LAB_SOCK"
[ttrpc]
  address = "$LAB_SOCK.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$LAB_DIR/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$LAB_PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$LAB_RUNC_ROOT"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$LAB_DIR/cni/bin"
    conf_dir = "$LAB_DIR/cni/net.d"
TOML
mkdir -p "$LAB_BLKIO"
log "starting containerd $(containerd --version | awk '{print $3}')"
# In its own blkio cgroup from the start (the shims it starts inherit it), so that the stall can throttle it alone.
nohup sh -c 'echo $$ >"$1/cgroup.procs" || exit 1; exec containerd --config "$2"' sh "$LAB_BLKIO" "$LAB_DIR/containerd.toml" \
  >"$LAB_DIR/logs/containerd.log" 2>&1 </dev/null &
echo $! >"$LAB_DIR/pids/containerd.pid"
wait_for "containerd" 60 lab_ctr version

import_images

# kubelet's identity: a node client certificate from the cluster's CA (the Node authorizer admits it).
pki=$CLUSTER_DIR/pki
(
  cd "$LAB_DIR/pki"
  exec 2>>"$LAB_DIR/logs/pki.log" >&2
  openssl req -new -newkey rsa:2048 -nodes -keyout kubelet.key -out kubelet.csr -subj "/O=system:nodes/CN=system:node:$LAB_NODE"
  openssl x509 -req -sha256 -days 30 -in kubelet.csr -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -out kubelet.crt \
    -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth')
)
. "$CLUSTER_DIR/env"
k=$LAB_DIR/kubelet.kubeconfig
"$KUBECTL" config set-cluster local --server="https://127.0.0.1:$API_PORT" --certificate-authority="$pki/ca.crt" --embed-certs --kubeconfig="$k" >/dev/null
"$KUBECTL" config set-credentials node --client-certificate="$LAB_DIR/pki/kubelet.crt" --client-key="$LAB_DIR/pki/kubelet.key" --embed-certs --kubeconfig="$k" >/dev/null
"$KUBECTL" config set-context local --cluster=local --user=node --kubeconfig="$k" >/dev/null
"$KUBECTL" config use-context local --kubeconfig="$k" >/dev/null

kubelet_port=$(free_port); healthz_port=$(free_port "$kubelet_port")
echo "KUBELET_PORT=$kubelet_port" >"$LAB_DIR/env"
echo "KUBELET_HEALTHZ_PORT=$healthz_port" >>"$LAB_DIR/env"
# cgroupsPerQOS: every pod in a cgroup of its own, kubepods/<qos>/pod<uid>, as on a real node: the agent measures
# each pod's IO there (without it kubelet gives the runtime no cgroup parent for a pod). make lab-down removes them.
cat >"$LAB_DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: false }
  x509: { clientCAFile: $pki/ca.crt }
authorization: { mode: AlwaysAllow }
containerRuntimeEndpoint: unix://$LAB_SOCK
runtimeRequestTimeout: $LAB_RUNTIME_REQUEST_TIMEOUT
# A status update every 10 s even when nothing changed (the default is 5 minutes with a node lease): the lab shows
# that kubelet's own updates keep the operator's Node condition.
nodeStatusReportFrequency: 10s
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: []
failSwapOn: false
podLogsDir: $LAB_DIR/pod-logs
volumePluginDir: $LAB_DIR/kubelet/volume-plugins
resolvConf: /etc/resolv.conf
serializeImagePulls: false
maxPods: 30
evictionHard: { memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%" }
imageGCHighThresholdPercent: 100
YAML
log "starting kubelet $("$KUBELET_BIN" --version | awk '{print $2}') as $LAB_NODE (runtimeRequestTimeout $LAB_RUNTIME_REQUEST_TIMEOUT)"
nohup "$KUBELET_BIN" --config="$LAB_DIR/kubelet.yaml" --kubeconfig="$k" --root-dir="$LAB_DIR/kubelet" \
  --cert-dir="$LAB_DIR/kubelet/pki" --hostname-override="$LAB_NODE" \
  --node-labels="sandbox.remediator.io/lab=true" --node-ip="$LAB_GATEWAY" --v=2 \
  >"$LAB_DIR/logs/kubelet.log" 2>&1 </dev/null &
echo $! >"$LAB_DIR/pids/kubelet.pid"
wait_for "node $LAB_NODE" 120 sh -c "'$KUBECTL' --kubeconfig='$KUBECONFIG_FILE' get node '$LAB_NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
log "node $LAB_NODE: $(kc get node "$LAB_NODE" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}, kubelet {.status.nodeInfo.kubeletVersion}')"

# A pod whose image was built here runs on the node; then it goes, leaving the node empty for tests.
kc create namespace lab --dry-run=client -o yaml | kc apply -f - >/dev/null
kc -n lab delete pod lab-smoke --ignore-not-found --wait >/dev/null
kc -n lab apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: { name: lab-smoke }
spec:
  nodeName: $LAB_NODE
  terminationGracePeriodSeconds: 5
  containers:
    - { name: app, image: $LAB_APP_IMAGE, imagePullPolicy: Never }
YAML
wait_for "pod lab/lab-smoke on $LAB_NODE" 120 sh -c "'$KUBECTL' --kubeconfig='$KUBECONFIG_FILE' -n lab get pod lab-smoke -o jsonpath='{.status.phase}' | grep -qx Running"
kc -n lab get pod lab-smoke -o wide >&2
kc -n lab delete pod lab-smoke --wait >/dev/null
log "lab up in $(( $(date +%s) - started ))s: node $LAB_NODE in the network namespace $LAB_NETNS (kubeconfig $KUBECONFIG_FILE, for hack/lab/exec.sh kubectl ...); logs in $LAB_DIR/logs; stop it with make lab-down"
