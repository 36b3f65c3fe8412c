#!/usr/bin/env bash
# make verify: actionlint on .github/workflows/ (the release workflow cannot run here), built from the Go module
# proxy into ~/.cache the first time (hack/cluster/build.sh actionlint, keyed by ACTIONLINT_VERSION).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
. "$repo/hack/cluster/versions.env"
"$repo/hack/cluster/build.sh" actionlint
cd "$repo"
"${SANDBOX_REMEDIATOR_CACHE:-$HOME/.cache/sandbox-remediator}/bin/actionlint-v$ACTIONLINT_VERSION/actionlint" \
  .github/workflows/*.yaml
