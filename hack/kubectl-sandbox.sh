#!/usr/bin/env bash
# kubectl-sandbox: the kubectl plugin of sandbox-remediator (`kubectl sandbox diagnose [NODE]`), written by
# `make plugin` from hack/kubectl-sandbox.sh, with the absolute path of the checkout it was made in filled in.
# kubectl hands it every argument after "sandbox" and its environment ($KUBECONFIG included).
set -euo pipefail
main='@REPO@/dist/src/main.js'
if [[ ! -f "$main" ]]; then
  echo "kubectl-sandbox: $main is missing: run \`make plugin\` in @REPO@ again" >&2
  exit 2
fi
exec node "$main" "$@"
