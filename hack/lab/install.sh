#!/usr/bin/env bash
# `make lab-install`: the chart on the lab's real node, as a user installs it. Builds the image from this checkout
# (hack/image/build.sh, with no container engine; run from inside the lab's namespace, it takes the one built), loads it into the lab node's containerd, and runs `helm upgrade
# --install` of charts/sandbox-remediator in the lab's network namespace: the operator (one replica, leader election
# on, the pacing webhook on with a generated certificate) and the agent as Pods on the real kubelet, both kept off
# the kwok nodes (a simulated node runs no process). Waits until they are Ready. `hack/lab/install.sh uninstall`
# runs helm uninstall and the cleanup the README's uninstall documents.
set -euo pipefail
LOG_TAG=lab-install
. "$(dirname "$0")/lib.sh"
# The release's image, as config/ and the chart name it (make version moves it).
IMAGE=${IMAGE:-$("$repo/node_modules/.bin/tsx" "$repo/hack/release/version.ts" --image)}
ARCHIVE=${IMAGE_ARCHIVE:-$repo/.image/sandbox-remediator.oci.tar}
RELEASE=sandbox-remediator
NAMESPACE=sandbox-remediator-system
HELM=$BIN/helm-v$HELM_VERSION/helm
[ -x "$HELM" ] || "$here/build.sh" helm
in_ns() { lab_netns_exec "$@"; }
helm_() { in_ns "$HELM" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
kcn() { in_ns "$KUBECTL" --kubeconfig="$KUBECONFIG_FILE" "$@"; }
kcn get node "$LAB_NODE" >/dev/null 2>&1 || die "no lab node $LAB_NODE: run make lab first"

if [ "${1:-}" = uninstall ]; then
  # The README's uninstall: the operator stopped first, then what it did undone while the agents still run (they lift
  # IO limits), then the release, the CRDs (helm leaves them by design) and the namespace made before helm install.
  if kcn get deployment "$RELEASE-operator" -n "$NAMESPACE" >/dev/null 2>&1; then
    kcn scale deployment "$RELEASE-operator" -n "$NAMESPACE" --replicas=0 >&2
    kcn wait pod -n "$NAMESPACE" -l app.kubernetes.io/component=operator --for=delete --timeout=120s >&2
  fi
  if kcn get crd sandboxpolicies.sandbox.remediator.io >/dev/null 2>&1; then
    (cd "$repo" && in_ns env KUBECONFIG="$KUBECONFIG_FILE" npx --no-install tsx src/main.ts cleanup >&2)
  fi
  helm_ uninstall "$RELEASE" -n "$NAMESPACE" --wait --timeout 3m || log "helm uninstall: nothing to remove"
  kcn delete -f "$repo/crds/" --ignore-not-found --wait >&2
  kcn delete namespace "$NAMESPACE" --ignore-not-found --wait >&2
  log "uninstalled"
  exit 0
fi

# Built outside the lab's network namespace, which reaches neither Debian's archive nor npm's registry.
if in_lab_netns; then
  [ -s "$ARCHIVE" ] || die "no image at $ARCHIVE, and the lab's network namespace cannot build one: make image first"
else
  "$repo/hack/image/build.sh" "$IMAGE" "$ARCHIVE"
fi
log "loading $ARCHIVE into the lab node's containerd"
lab_ctr images import "$ARCHIVE" >&2
image_ref=$(lab_ctr images ls -q | grep -m1 -E "(^|/)${IMAGE//./\\.}\$" || true)
[ -n "$image_ref" ] || die "containerd lists no $IMAGE after the import"

# As the README's install block: the namespace first, under Pod Security's restricted profile.
kcn create namespace "$NAMESPACE" --dry-run=client -o yaml | kcn apply -f - >/dev/null
kcn label namespace "$NAMESPACE" pod-security.kubernetes.io/enforce=restricted --overwrite >/dev/null
log "helm upgrade --install $RELEASE (image $image_ref, never pulled)"
selector='sandbox\.remediator\.io/lab'
helm_ upgrade --install "$RELEASE" "$repo/charts/sandbox-remediator" -n "$NAMESPACE" \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set operator.replicas=1 --set-string "operator.nodeSelector.$selector=true" \
  --set-string "agent.nodeSelector.$selector=true" \
  --set 'agent.extraArgs={--include-loop-devices,--runtime-cgroup=sandbox-remediator-lab,--heartbeat-seconds=3}' \
  --set webhook.enabled=true --wait --timeout 5m >&2
kcn -n "$NAMESPACE" get pods -o wide >&2
kcn -n "$(kcn get daemonset -A -l app.kubernetes.io/name=sandbox-remediator -o jsonpath='{.items[0].metadata.namespace}')" get pods -o wide >&2
log "installed: the operator and the agent run as Pods on $LAB_NODE"
