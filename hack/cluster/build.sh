#!/usr/bin/env bash
# Builds the local control plane from Go modules into $HOME/.cache/sandbox-remediator/bin/<component>-<version>/
# and skips whatever is already there. Usage:
#   hack/cluster/build.sh [kubernetes|kubelet|etcd|kwok|helm|actionlint|descheduler|argo-rollouts|node-healthcheck|cluster-api ...]
# (no argument: the control plane and helm, which the chart's tests run; kubelet, for make lab, the descheduler, for
# the side-by-side benchmark, and the rest only when named; make tools names node-healthcheck and cluster-api, which
# the integration tests use; make verify names actionlint, which lints the release workflow).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

CACHE=${SANDBOX_REMEDIATOR_CACHE:-$HOME/.cache/sandbox-remediator}
BIN=$CACHE/bin
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# built <dir> <binary...>: true when every binary exists and is executable
built() { local d=$1; shift; for b in "$@"; do [ -x "$d/$b" ] || return 1; done; }

# timed <label> <command...>: runs the command and reports how long it took
timed() {
  local label=$1 start; shift; start=$(date +%s)
  log "building $label: once per machine, then cached in $BIN (the whole control plane takes about 8 minutes on 2 cores)"
  "$@"
  log "built $label in $(( $(date +%s) - start ))s"
}

# kubernetes_module <dir>: a wrapper module in <dir> requiring k8s.io/kubernetes at KUBERNETES_VERSION.
kubernetes_module() {
  local work=$1 sv=0.${KUBERNETES_VERSION#1.}
  # k8s.io/kubernetes requires its staging modules at v0.0.0 with replace directives to ./staging, which
  # a dependent module cannot follow; point each at its published v0.<minor>.<patch> instead.
  {
    echo 'module local.invalid/kbuild'
    echo 'go 1.24.0'
    echo 'godebug default=go1.24'
    echo "require k8s.io/kubernetes v$KUBERNETES_VERSION"
    echo 'replace ('
    for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
      cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api \
      cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms \
      kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics \
      mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller; do
      echo "  k8s.io/$m => k8s.io/$m v$sv"
    done
    echo ')'
  } > "$work/go.mod"
}

# kubernetes_ldflags: the version stamps kubectl, the apiserver and kubelet report.
kubernetes_ldflags() {
  local minor v=k8s.io/component-base/version c=k8s.io/client-go/pkg/version now
  minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "-s -w -X $v.gitVersion=v$KUBERNETES_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=$now -X $c.gitVersion=v$KUBERNETES_VERSION -X $c.gitMajor=1 -X $c.gitMinor=$minor"
}

build_kubernetes() {
  local out=$BIN/kubernetes-v$KUBERNETES_VERSION work
  built "$out" kube-apiserver kube-controller-manager kube-scheduler kubectl && { log "kubernetes v$KUBERNETES_VERSION cached in $out"; return; }
  work=$(mktemp -d)
  kubernetes_module "$work"
  mkdir -p "$out.tmp"
  # kubectl too: a fresh machine may have none, and this one matches the apiserver's version exactly.
  (cd "$work" && timed "kubernetes v$KUBERNETES_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)" \
    go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$(kubernetes_ldflags)" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl)
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
  "$out/kube-apiserver" --version >&2
}

# kubelet, for the real node of `make lab` only: from the same module and version as the control plane, in a cache
# directory of its own so that the control plane's stays valid.
build_kubelet() {
  local out=$BIN/kubelet-v$KUBERNETES_VERSION work
  built "$out" kubelet && { log "kubelet v$KUBERNETES_VERSION cached in $out"; return; }
  work=$(mktemp -d)
  kubernetes_module "$work"
  mkdir -p "$out.tmp"
  (cd "$work" && timed "kubelet v$KUBERNETES_VERSION (for make lab; about 12 minutes on 2 cores)" \
    go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$(kubernetes_ldflags)" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kubelet)
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
  "$out/kubelet" --version >&2
}

build_etcd() {
  local out=$BIN/etcd-v$ETCD_VERSION work
  built "$out" etcd && { log "etcd v$ETCD_VERSION cached in $out"; return; }
  work=$(mktemp -d)
  printf 'module local.invalid/etcdbuild\ngo 1.25.0\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > "$work/go.mod"
  mkdir -p "$out.tmp"
  (cd "$work" && timed "etcd v$ETCD_VERSION" go build -trimpath -ldflags='-s -w' -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
  "$out/etcd" --version >&2
}

build_kwok() {
  local out=$BIN/kwok-v$KWOK_VERSION
  built "$out" kwok && { log "kwok v$KWOK_VERSION cached in $out"; return; }
  mkdir -p "$out.tmp"
  timed "kwok v$KWOK_VERSION" env GOBIN="$out.tmp" go install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  rm -rf "$out" && mv "$out.tmp" "$out"
  "$out/kwok" --version >&2 || true
}

build_descheduler() {
  local out=$BIN/descheduler-v$DESCHEDULER_VERSION src work
  built "$out" descheduler && { log "descheduler v$DESCHEDULER_VERSION cached in $out"; return; }
  # Its go.mod has replace directives, which `go install pkg@version` refuses: build it as the main module, from
  # a writable copy of the module the proxy serves.
  src=$(go mod download -json "sigs.k8s.io/descheduler@v$DESCHEDULER_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).Dir))')
  work=$(mktemp -d)
  cp -r "$src/." "$work/" && chmod -R u+w "$work"
  mkdir -p "$out.tmp"
  (cd "$work" && timed "descheduler v$DESCHEDULER_VERSION" go build -trimpath -ldflags='-s -w' -o "$out.tmp/descheduler" ./cmd/descheduler)
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
  "$out/descheduler" version >&2 || true
}

# helm, for the chart in charts/ (its tests, and `make manifests` does not need it). Its go.mod has no replace
# directives, so `go install` builds it from the proxy's module. The stamps are the ones its own Makefile sets for
# a release: the version `helm version` reports, and the Kubernetes version that `helm template` and `helm lint`
# assume without a cluster (.Capabilities.KubeVersion; 1.20 otherwise), taken from the client-go it requires.
build_helm() {
  local out=$BIN/helm-v$HELM_VERSION mod client_go minor p=helm.sh/helm/v3
  built "$out" helm && { log "helm v$HELM_VERSION cached in $out"; return; }
  mod=$(go mod download -json "$p@v$HELM_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).GoMod))')
  client_go=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$mod")
  [ -n "$client_go" ] || { log "helm v$HELM_VERSION: no k8s.io/client-go in its go.mod; look again"; exit 1; }
  minor=$(echo "$client_go" | cut -d. -f2)
  mkdir -p "$out.tmp"
  timed "helm v$HELM_VERSION (about 3½ minutes on 2 cores)" env GOBIN="$out.tmp" go install -trimpath \
    -ldflags="-s -w -X $p/internal/version.version=v$HELM_VERSION -X $p/internal/version.gitTreeState=clean -X $p/pkg/lint/rules.k8sVersionMajor=1 -X $p/pkg/lint/rules.k8sVersionMinor=$minor -X $p/pkg/chartutil.k8sVersionMajor=1 -X $p/pkg/chartutil.k8sVersionMinor=$minor" \
    "$p/cmd/helm@v$HELM_VERSION"
  rm -rf "$out" && mv "$out.tmp" "$out"
  "$out/helm" version >&2
}

# actionlint, which make verify runs on .github/workflows/ (the release workflow cannot run here). A plain go install;
# the version it reports is stamped as its own release does.
build_actionlint() {
  local out=$BIN/actionlint-v$ACTIONLINT_VERSION p=github.com/rhysd/actionlint
  built "$out" actionlint && return
  mkdir -p "$out.tmp"
  timed "actionlint v$ACTIONLINT_VERSION (about a minute on 2 cores)" env GOBIN="$out.tmp" go install -trimpath \
    -ldflags="-s -w -X $p.version=v$ACTIONLINT_VERSION" "$p/cmd/actionlint@v$ACTIONLINT_VERSION"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

argo_rollouts_src() {
  go mod download -json "github.com/argoproj/argo-rollouts@v$ARGO_ROLLOUTS_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).Dir))'
}

build_argo-rollouts() {
  local out=$BIN/argo-rollouts-v$ARGO_ROLLOUTS_VERSION-loopback src work
  if built "$out" rollouts-controller; then
    # Its controller waits for all five of its CRDs (experiments and analysis too) before it rolls anything out:
    # a cache from before they were kept gets them from the same module, without a rebuild.
    [ -f "$out/crds/rollout-crd.yaml" ] || { mkdir -p "$out/crds" && cp "$(argo_rollouts_src)"/manifests/crds/*-crd.yaml "$out/crds/"; }
    log "argo-rollouts v$ARGO_ROLLOUTS_VERSION cached in $out"
    return
  fi
  # Replace directives again (its k8s.io staging modules): built as the main module from a writable copy, as the
  # descheduler is; the CRDs come from the same module, so controller and CRDs are of one version.
  src=$(argo_rollouts_src)
  work=$(mktemp -d)
  cp -r "$src/." "$work/" && chmod -R u+w "$work"
  # Its metrics and healthz servers listen on 0.0.0.0 with no flag to change it; servers started here bind to
  # loopback only, so the one line that says where is changed (hence -loopback in the cache key).
  sed -i 's/"0\.0\.0\.0:%d"/"127.0.0.1:%d"/' "$work/controller/controller.go"
  grep -q '"127.0.0.1:%d"' "$work/controller/controller.go" || { log "argo-rollouts: its listen address moved; look again"; exit 1; }
  mkdir -p "$out.tmp/crds"
  (cd "$work" && timed "argo-rollouts v$ARGO_ROLLOUTS_VERSION (about 15 minutes on 2 cores)" go build -trimpath -ldflags='-s -w' -o "$out.tmp/rollouts-controller" ./cmd/rollouts-controller)
  cp "$work"/manifests/crds/*-crd.yaml "$out.tmp/crds/"
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
}

# module_dir <module@version>: where the Go module cache holds that module's source (downloaded when missing).
module_dir() {
  go mod download -json "$1" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const m=JSON.parse(s);if(m.Error){console.error(m.Error);process.exit(1)}console.log(m.Dir)})'
}

# medik8s node-healthcheck-operator, the peer that remediates a node on our Node condition (the integration tests run
# it, hence make tools). Built as the main module from a writable copy, as the descheduler is; its CRD comes from the
# same module.
build_node-healthcheck() {
  local out=$BIN/node-healthcheck-v$NHC_VERSION-nowebhooks src work main k8s=0.${KUBERNETES_VERSION#1.}
  built "$out" node-healthcheck-operator && [ -f "$out/crds/remediation.medik8s.io_nodehealthchecks.yaml" ] &&
    { log "node-healthcheck v$NHC_VERSION cached in $out"; return; }
  src=$(module_dir "github.com/medik8s/node-healthcheck-operator@v$NHC_VERSION")
  work=$(mktemp -d)
  cp -r "$src/." "$work/" && chmod -R u+w "$work"
  # Its k8s.io/kube-aggregator (v0.34.7, indirect) is one the module proxy here refuses (403, "not available"); the
  # control plane's own version of it builds, and matches the apiserver it talks to.
  (cd "$work" && go mod edit -replace "k8s.io/kube-aggregator=k8s.io/kube-aggregator@v$k8s")
  # It always registers its validating webhook, whose server listens on :9443 (every address) and needs serving
  # certificates; a process beside the local cluster gets no webhook configuration. The one call is made to honour
  # ENABLE_WEBHOOKS=false, kubebuilder's usual switch (hence -nowebhooks in the cache key); the CRD's schema still
  # validates.
  main=$work/cmd/main.go
  sed -i 's/^\tif err = webhookv1alpha1\.SetupWebhookWithManager(/\tif os.Getenv("ENABLE_WEBHOOKS") == "false" {\n\t\tsetupLog.Info("webhooks disabled by ENABLE_WEBHOOKS=false")\n\t} else if err = webhookv1alpha1.SetupWebhookWithManager(/' "$main"
  grep -q 'webhooks disabled by ENABLE_WEBHOOKS=false' "$main" || { log "node-healthcheck: its webhook set-up moved; look again"; exit 1; }
  mkdir -p "$out.tmp/crds"
  local v=github.com/medik8s/node-healthcheck-operator/version
  (cd "$work" && timed "node-healthcheck v$NHC_VERSION (about 2 minutes on 2 cores)" \
    go build -trimpath -ldflags="-s -w -X $v.Version=v$NHC_VERSION -X $v.GitCommit=v$NHC_VERSION" -o "$out.tmp/node-healthcheck-operator" ./cmd)
  cp "$work"/config/crd/bases/*.yaml "$out.tmp/crds/"
  rm -rf "$out" && mv "$out.tmp" "$out" && rm -rf "$work"
}

# Cluster API: nothing is built, only its MachineHealthCheck CRD is kept, to check config/samples/health-checks.
build_cluster-api() {
  local out=$BIN/cluster-api-v$CLUSTER_API_VERSION src
  [ -f "$out/crds/cluster.x-k8s.io_machinehealthchecks.yaml" ] && { log "cluster-api v$CLUSTER_API_VERSION CRDs cached in $out"; return; }
  src=$(module_dir "sigs.k8s.io/cluster-api@v$CLUSTER_API_VERSION")
  mkdir -p "$out.tmp/crds"
  cp "$src/core/config/crd/bases/cluster.x-k8s.io_machinehealthchecks.yaml" "$out.tmp/crds/"
  chmod -R u+w "$out.tmp" # the module cache's files are read-only
  rm -rf "$out" && mv "$out.tmp" "$out"
}

command -v go >/dev/null || { log "go is not installed; install Go >= 1.26 first"; exit 1; }
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(etcd kwok kubernetes helm)
for t in "${targets[@]}"; do
  case $t in
    kubernetes|kubelet|etcd|kwok|helm|actionlint|descheduler|argo-rollouts|node-healthcheck|cluster-api) "build_$t" ;;
    *) log "unknown component: $t (expected kubernetes, kubelet, etcd, kwok, helm, actionlint, descheduler, argo-rollouts, node-healthcheck or cluster-api)"; exit 2 ;;
  esac
done
