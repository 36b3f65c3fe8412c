#!/usr/bin/env bash
# Creates or deletes a kwok-simulated node: hack/cluster/node.sh create|delete NAME [LABEL=VALUE ...]
set -euo pipefail
LOG_TAG=node
. "$(dirname "$0")/lib.sh"
action=${1:-}; name=${2:-}
[ -n "$action" ] && [ -n "$name" ] || die "usage: node.sh create|delete NAME [LABEL=VALUE ...]"
shift 2
case $action in
  create)
    labels=""
    for kv in "$@"; do labels+="    ${kv%%=*}: \"${kv#*=}\"\n"; done
    printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n  annotations:\n    kwok.x-k8s.io/node: fake\n    node.alpha.kubernetes.io/ttl: "0"\n  labels:\n    type: kwok\n    kubernetes.io/hostname: %s\n    kubernetes.io/os: linux\n    kubernetes.io/arch: amd64\n%b' \
      "$name" "$name" "$labels" | kc apply -f -
    ;;
  delete) kc delete node "$name" --ignore-not-found ;;
  *) die "unknown action $action" ;;
esac
