#!/usr/bin/env bash
# hack/lab/image.sh NAME BINARY OUT.tar: packs BINARY as /NAME's entrypoint into a single-layer OCI image layout tar
# named NAME (e.g. sandbox-remediator.local/pause:lab) that `ctr images import` reads. No registry is involved.
set -euo pipefail
name=$1 binary=$2 out=$3
entry=/$(basename "$binary")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$work/layout/blobs/sha256"
install -m 0755 "$binary" "$work/rootfs/$entry"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" .
blob() { # file -> digest (and stores it)
  local d; d=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$work/layout/blobs/sha256/$d"
  echo "$d"
}
size() { stat -c %s "$1"; }
layer=$(blob "$work/layer.tar")
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["%s"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$entry" "$layer" >"$work/config.json"
config=$(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config" "$(size "$work/config.json")" "$layer" "$(size "$work/layer.tar")" >"$work/manifest.json"
manifest=$(blob "$work/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$(size "$work/manifest.json")" "$name" "${name##*:}" >"$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
tar --owner=0 --group=0 --numeric-owner -C "$work/layout" -cf "$out" oci-layout index.json blobs
