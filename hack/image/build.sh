#!/usr/bin/env bash
# hack/image/build.sh IMAGE OUT: the image the Dockerfile describes, built with no container engine and no registry,
# from Debian's archive: a base layer of Debian forky with its Node.js (the same major as the Dockerfile's base) made
# by mmdebstrap, and an app layer with what the Dockerfile's last stage copies (package.json, production
# node_modules, dist/, crds/). OUT is an OCI image layout in a tar, as `ctr images import`, `podman load` or
# `skopeo copy oci-archive:OUT ...` read it. Runs as the user 65532 from /app, like the Dockerfile's.
#
# The base layer is cached under ~/.cache/sandbox-remediator/image, keyed by the suite and the Node.js version the
# archive serves (a new upload makes a new base). Root is needed (mmdebstrap's root mode); `make image` calls this
# when no container engine is running. Progress goes to stderr.
set -euo pipefail
image=${1:?usage: build.sh IMAGE OUT.tar}
out=${2:?usage: build.sh IMAGE OUT.tar}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/versions.env"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-remediator/image
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
log() { echo "[image] $*" >&2; }
die() {
  echo "[image] error: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || die "building the base layer needs root (mmdebstrap's root mode); run it as root, or use a container engine (make image)"
need=()
for cmd in mmdebstrap xz curl; do command -v "$cmd" >/dev/null || need+=("$cmd"); done
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${need[*]} and no apt-get: install them by hand"
  pkgs=$(printf '%s\n' "${need[@]}" | sed 's/^xz$/xz-utils/' | sort -u | tr '\n' ' ')
  log "installing Debian packages: $pkgs"
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi

# This machine's architecture, as Debian and OCI both name it (amd64, arm64).
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
mkdir -p "$cache"
# IMAGE_CACHED_BASE=1 (the image test): the newest base built before, with no look at the archive; else the
# Node.js the archive serves now, whose version keys the base.
cached=$(ls -t "$cache"/base-"$IMAGE_SUITE"-"$arch"-nodejs-*.tar 2>/dev/null | head -n 1 || true)
if [ "${IMAGE_CACHED_BASE:-}" = 1 ] && [ -n "$cached" ]; then
  node_version=$(basename "$cached" .tar)
  node_version=${node_version#base-"$IMAGE_SUITE"-"$arch"-nodejs-}
else
  node_version=$(curl -fsS "$mirror/dists/$IMAGE_SUITE/main/binary-$arch/Packages.xz" | xz -dc |
    awk '/^Package: nodejs$/{p=1;next} /^Package:/{p=0} p&&/^Version:/&&!v{v=$2} END{print v}')
  [ -n "$node_version" ] || die "no nodejs in $mirror $IMAGE_SUITE"
  case "$node_version" in "$IMAGE_NODE_MAJOR".*) ;; *)
    die "$IMAGE_SUITE serves Node.js $node_version, not $IMAGE_NODE_MAJOR.x (the Dockerfile's major): update hack/image/versions.env and the Dockerfile together"
    ;;
  esac
  node_version=${node_version//[^A-Za-z0-9.]/_}
fi
key="$IMAGE_SUITE-$arch-nodejs-$node_version"
base="$cache/base-$key.tar"
if [ ! -s "$base" ]; then
  log "building the base layer: Debian $IMAGE_SUITE, nodejs $node_version (mmdebstrap; about a minute)"
  tmp="$cache/partial-$key.tar" # the .tar suffix tells mmdebstrap to write a tarball
  rm -f "$tmp"
  # essential: no apt in the image; docs, man pages and locales left out. Check-Valid-Until: a mirror may serve a
  # snapshot whose Release has expired (this machine's does); its signature is still checked.
  SOURCE_DATE_EPOCH=$epoch mmdebstrap --mode=root --variant=essential --include=nodejs,ca-certificates \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/log/*' --quiet \
    "$IMAGE_SUITE" "$tmp" "deb $mirror $IMAGE_SUITE main" >&2
  mv "$tmp" "$base"
  find "$cache" -name 'base-*.tar' ! -name "base-$key.tar" -delete # older bases
else
  log "reusing the base layer $base"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The app layer: what the Dockerfile's last stage copies, owned by root and only read at run time.
log "compiling (tsc) and installing production dependencies (npm ci --omit=dev)"
(cd "$repo" && npx --no-install tsc -p tsconfig.build.json --outDir "$work/root/app/dist")
cp "$repo/package.json" "$repo/package-lock.json" "$work/root/app/"
(cd "$work/root/app" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error >&2)
rm "$work/root/app/package-lock.json"
cp -r "$repo/crds" "$work/root/app/crds"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$work/root" -cf "$work/app.tar" ./app

mkdir -p "$work/layout/blobs/sha256"
blob() { # FILE -> its digest; stored in the layout
  local d
  d=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$work/layout/blobs/sha256/$d"
  echo "$d"
}
size() { stat -c %s "$1"; }
base_id=$(sha256sum "$base" | cut -d' ' -f1)
app_id=$(sha256sum "$work/app.tar" | cut -d' ' -f1)
gzip -n -1 -c "$base" >"$work/base.tar.gz"
gzip -n -1 -c "$work/app.tar" >"$work/app.tar.gz"
base_blob=$(blob "$work/base.tar.gz")
app_blob=$(blob "$work/app.tar.gz")
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
# As the Dockerfile's last stage: ENV, WORKDIR, USER and ENTRYPOINT.
cat >"$work/config.json" <<JSON
{"architecture":"$arch","os":"linux","created":"$created",
 "config":{"User":"65532:65532","WorkingDir":"/app",
  "Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","NODE_ENV=production"],
  "Entrypoint":["node","--optimize-for-size","dist/src/main.js"],
  "Labels":{"org.opencontainers.image.title":"sandbox-remediator","org.opencontainers.image.base.name":"debian:$IMAGE_SUITE nodejs $node_version"}},
 "rootfs":{"type":"layers","diff_ids":["sha256:$base_id","sha256:$app_id"]},
 "history":[{"created":"$created","created_by":"mmdebstrap --variant=essential --include=nodejs,ca-certificates $IMAGE_SUITE"},
            {"created":"$created","created_by":"hack/image/build.sh: /app"}]}
JSON
config=$(blob "$work/config.json")
layer() { printf '{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}' "$1" "$2"; }
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[%s,%s]}' \
  "$config" "$(size "$work/config.json")" \
  "$(layer "$base_blob" "$(size "$work/base.tar.gz")")" "$(layer "$app_blob" "$(size "$work/app.tar.gz")")" >"$work/manifest.json"
manifest=$(blob "$work/manifest.json")
# containerd reads io.containerd.image.name, fully qualified as the kubelet asks for it.
first=${image%%/*}
case "$image" in */*) ;; *) first= ;; esac
if [ -n "$first" ] && { [[ $first == *.* ]] || [[ $first == *:* ]] || [ "$first" = localhost ]; }; then
  qualified=$image
elif [[ $image == */* ]]; then
  qualified=docker.io/$image
else
  qualified=docker.io/library/$image
fi
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$(size "$work/manifest.json")" "$qualified" "${image##*:}" >"$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$work/layout" -cf "$out.partial" oci-layout index.json blobs
mv "$out.partial" "$out"
log "wrote $out ($qualified, $(du -h "$out" | cut -f1); Node.js $node_version on Debian $IMAGE_SUITE)"
