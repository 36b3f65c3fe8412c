#!/usr/bin/env bash
# make test-integration: the integration tests as SHARDS (2) mocha runs at once, each against a local cluster of its
# own (shard 1 uses .cluster/, reusing a running one; shard N uses .cluster-N/; hack/cluster picks free ports).
# Most of a test's time is spent waiting on the clocks it tests (stuck thresholds, sustain and recovery, eviction
# rates, cooldowns), so two runs on 2 cores take little more than the longer of the two.
#
# The tests that read this machine's real /proc and load its disk (the demo, io-pressure) share a shard: one's
# stress-ng would otherwise stop the other's recovery. They run last in it, when the other shard is at its short
# tests: its longest, the event flood (tens of thousands of Events into etcd on the same disk), runs first, and
# io-pressure's recovery (10 s below its thresholds) timed out in both full runs here that had it beside the flood.
# Files are spread by their measured duration (SECONDS_OF below),
# longest first, each to the shard with the least so far. Each shard's output is prefixed [N]; the last line sums
# the shards' "N passed, N failed, N skipped" lines, as CI reads them. SHARDS=1 runs everything in one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH="$repo/node_modules/.bin:$PATH"
SHARDS=${SHARDS:-2}
# Roughly the seconds each file takes on a 2-core machine (from make test's per-test times, 2026-12-01); only the
# balance matters; a file not listed counts 60.
declare -A SECONDS_OF=(
  [event-flood]=270 [faults]=235 [demo]=170 [scale]=150 [io-faults]=120 [rollouts]=200 [rollout-kinds]=150 [remediation]=120
  [leader-election]=100 [pacing]=90 [diagnose]=90 [policy-fuzz]=80 [io-pressure]=110 [cluster]=60
  [startup-mistakes]=60 [operator]=60 [monitoring-config]=60 [rbac]=60 [startup]=45 [workloads]=45
  [kubelet-summary]=40 [culprit]=70 [incident]=30 [crds]=30 [install-crds]=30 [agent-admission]=30 [image]=60
  [operator-admission]=20 [operator-admission-nodes]=20 [webhook-certs]=75 [helm-chart]=35 [node-lease]=65 [tenant]=140
  [readme]=40 [crd-upgrade]=10 [package]=45
)
REAL_PROC=(demo io-pressure)

declare -a load shard_files
for ((i = 0; i < SHARDS; i++)); do load[i]=0; shard_files[i]=""; done
# The real-/proc group counted first, as one item (its files go at the end of shard 1's list).
group=0
for name in "${REAL_PROC[@]}"; do group=$((group + ${SECONDS_OF[$name]:-60})); done
load[0]=$group
mapfile -t rest < <(
  for f in test/integration/*.test.ts; do
    name=$(basename "$f" .test.ts)
    [[ " ${REAL_PROC[*]} " == *" $name "* ]] && continue
    echo "${SECONDS_OF[$name]:-60} $f"
  done | sort -rn
)
for line in "${rest[@]}"; do
  seconds=${line%% *}; file=${line#* }
  best=0
  for ((i = 1; i < SHARDS; i++)); do (( load[i] < load[best] )) && best=$i; done
  load[best]=$((load[best] + seconds))
  shard_files[best]+=" $file"
done
for name in "${REAL_PROC[@]}"; do shard_files[0]+=" test/integration/$name.test.ts"; done

logs=$(mktemp -d)
pids=()
for ((i = 0; i < SHARDS; i++)); do
  n=$((i + 1))
  dir=$repo/.cluster; (( i > 0 )) && dir=$repo/.cluster-$n
  echo "[integration] shard $n of $SHARDS (about ${load[i]} s of tests, cluster in ${dir#"$repo"/}):${shard_files[i]}" >&2
  # shellcheck disable=SC2086 # the file list is meant to split
  (
    CLUSTER_DIR=$dir mocha --import=tsx --forbid-only --require test/integration/hooks.ts --reporter test/support/summary-reporter.cjs \
      --timeout 120000 --slow 10000 ${shard_files[i]} 2>&1 | tee "$logs/$n.log" | sed -u "s/^/[$n] /"
    exit "${PIPESTATUS[0]}"
  ) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done

passed=0; failed=0; skipped=0
for ((i = 1; i <= SHARDS; i++)); do
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$logs/$i.log" | tail -1 || true)
  if [ -z "$line" ]; then echo "[integration] shard $i printed no summary" >&2; status=1; continue; fi
  read -r p _ f _ s _ <<<"${line//,/}"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
# CI shows only the end of the output: repeat each shard's failures (mocha's "N failing" section) just above the sum.
for ((i = 1; i <= SHARDS; i++)); do
  plain=$(sed 's/\x1b\[[0-9;]*m//g' "$logs/$i.log")
  if grep -qE '^ +[0-9]+ failing' <<<"$plain"; then
    echo "[integration] shard $i failures, again:" >&2
    sed -n '/^ \+[0-9]\+ failing/,$p' <<<"$plain" | grep -vE '^[0-9]+ passed, ' | head -n 120 | sed "s/^/[$i] /" >&2 || true
  fi
done
rm -rf "$logs"
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
