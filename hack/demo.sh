#!/usr/bin/env bash
# `make demo` (see hack/demo/demo.ts): resolves kubectl as the cluster scripts do (the one built beside the
# apiserver by make tools, so a fresh machine needs none) and runs the demo with the repository's tsx.
set -euo pipefail
LOG_TAG=demo
. "$(dirname "$0")/cluster/lib.sh"
export KUBECTL CLUSTER_DIR
exec node --import "$repo/node_modules/tsx/dist/esm/index.mjs" "$repo/hack/demo/demo.ts" "$@"
