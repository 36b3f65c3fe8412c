#!/usr/bin/env bash
# Installs the machine-level tools the tests and the demo use, when missing: Debian packages through apt-get
# (run as root on a Debian machine), the Go-built control plane, helm and node-healthcheck-operator
# (hack/cluster/build.sh, cached by version).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { printf '[install-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# command -> Debian package
declare -A wanted=(
  [openssl]=openssl
  [curl]=curl
  [stress-ng]=stress-ng
  [prometheus]=prometheus
  [prometheus-node-exporter]=prometheus-node-exporter
  [mmdebstrap]=mmdebstrap # the image's base (hack/image/build.sh, test/integration/image.test.ts)
  [xz]=xz-utils
)
missing=()
for cmd in "${!wanted[@]}"; do command -v "$cmd" >/dev/null || missing+=("${wanted[$cmd]}"); done
# Debian's archive keys, which mmdebstrap checks the base's packages against (present on Debian, not elsewhere).
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { log "missing ${missing[*]} and no apt-get: install them by hand"; exit 1; }
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || { log "Go >= 1.26 is required to build the local control plane and is not installed"; exit 1; }
"$here/cluster/build.sh"
# The peers the integration tests run or check against: node-healthcheck-operator (about 2 minutes cold on 2 cores,
# 4 under load) and cluster-api's MachineHealthCheck CRD (a download, nothing built).
"$here/cluster/build.sh" node-healthcheck cluster-api
