#!/usr/bin/env bash
# hack/lab/incident.sh MODE [SECONDS] [POD_UID]: makes the lab node's sandbox creation slow for real, in one of four
# ways, each ending by itself after SECONDS (default 300) or at `hack/lab/incident.sh stop`:
#   stall  the deterministic incident: containerd's own cgroup may do 1 read and 1 write per second on the lab disk
#          (blkio throttle, cgroup v1). containerd's RunPodSandbox then blocks in its own fsyncs and reads, which a
#          cancelled request cannot interrupt, so kubelet's retry meets "failed to reserve sandbox name".
#   io     the incident as it happens: bounded stress-ng --io/--hdd load, as in the incident's published
#          reproduction, on a lab disk given a small volume's budget (LAB_DISK_IOPS, 10, read and write, and
#          LAB_DISK_BPS, 1 MiB/s, write). The budget is set in the root blkio cgroup, which cgroup v1 does not pass
#          down: it binds the load and the kernel's writeback, not containerd, whose own IO is slowed by waiting
#          behind them on the same disk (its fsyncs need the filesystem's journal, full of the load's writes).
#   culprit  a real pod does the IO, and the disk's queue fills with it: the writer (hack/lab/writer) in pod POD_UID
#          starts (SIGUSR1) 32 concurrent O_DIRECT writes into its root on the lab disk, which for the while has a
#          small volume's queue (LAB_DISK_QUEUE, 16 requests) and passes IO straight to the machine's disk (loop direct
#          IO, which submits it there in the writer's cgroup). There the pod's writes are held to LAB_CULPRIT_BPS
#          (8 MiB/s, set on its container's cgroup: v1 limits bind only the cgroup they are set on), and until each is
#          done it holds a slot of the lab disk's queue: containerd, jbd2 and the flusher wait in blk_mq_get_tag for
#          one, and kubelet's retry meets the reserved name. O_DIRECT charges every write to the pod's own cgroup
#          (buffered writeback would be the flusher's); the agent, counting loop devices (--include-loop-devices),
#          finds the lab disk the busiest. `stop` ends the writer (kubelet restarts it, and it waits for SIGUSR1).
#   delay  the cheap case: the CNI ADD waits SECONDS (default 8) first. containerd cancels it at kubelet's deadline
#          and releases the name, so kubelet reports only "context deadline exceeded".
# Only the lab's loop device and the lab's own cgroups (containerd's, the culprit's) are limited; nothing else is.
set -euo pipefail
LOG_TAG=lab-incident
. "$(dirname "$0")/lib.sh"
mode=${1:-}
[ -d "$LAB_DIR" ] || die "no lab in $LAB_DIR: run make lab first"
loop=$(lab_loop); [ -n "$loop" ] || die "no loop device backs $LAB_DIR/disk.img: run make lab first"
dev=$(cat "/sys/class/block/$(basename "$loop")/dev")
ROOT_BLKIO=/sys/fs/cgroup/blkio
LAB_DISK_IOPS=${LAB_DISK_IOPS:-10}
LAB_DISK_BPS=${LAB_DISK_BPS:-1048576}
LAB_DISK_QUEUE=${LAB_DISK_QUEUE:-16}
LAB_CULPRIT_BPS=${LAB_CULPRIT_BPS:-8388608}
# The culprit's container cgroups and the device each is limited on, as set: lifted by stop.
CULPRIT_CGROUPS=$LAB_DIR/culprit-cgroups
QUEUE=/sys/class/block/$(basename "$loop")/queue/nr_requests

throttle() { # cgroup-dir read_iops write_iops write_bps [MAJ:MIN, default the lab disk's] (0 lifts)
  echo "${5:-$dev} $2" >"$1/blkio.throttle.read_iops_device"
  echo "${5:-$dev} $3" >"$1/blkio.throttle.write_iops_device"
  echo "${5:-$dev} $4" >"$1/blkio.throttle.write_bps_device"
}
# The whole disk under the lab disk's image (the agent's saturated disk): a partition's parent.
backing_disk() {
  local d
  d=$(findmnt -no MAJ:MIN -T "$LAB_DIR/disk.img" | tr -d ' ')
  if [ -e "/sys/dev/block/$d/partition" ]; then d=$(cat "/sys/dev/block/$d/../dev"); fi
  echo "$d"
}
# writers POD_UID: the pids of the lab writer in that pod's containers (kubelet's cgroups name the pod's UID).
writers() {
  local pid
  for pid in $(pgrep -x writer || true); do
    grep -q "^[0-9]*:blkio:/kubepods/.*pod$1/" "/proc/$pid/cgroup" 2>/dev/null && echo "$pid"
  done
}
# The watchdog that ends the incident by itself: a detached `sleep SECONDS; incident.sh stop`, started before
# anything is slowed so that a failure part-way still ends.
watchdog() {
  nohup sh -c 'sleep "$1"; exec "$2" stop' sh "$1" "$lab_here/incident.sh" >>"$LAB_DIR/logs/incident.log" 2>&1 </dev/null &
  echo $! >"$LAB_DIR/pids/incident-watchdog.pid"
}
# Every step on its own: the load first, then the limits, then the delay; none stops the others.
stop_all() {
  local pid
  if pid=$(lab_alive stress "stress-ng .*--temp-path $LAB_DISK/stress"); then
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true # stress-ng leads its workers' group
  fi
  rm -f "$LAB_DIR/pids/stress.pid"
  if [ -f "$CULPRIT_CGROUPS" ]; then
    while read -r cg on; do
      for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = writer ]; then kill "$pid" 2>/dev/null || true; fi
      done
      [ -d "$cg" ] && { throttle "$cg" 0 0 0 "$on" || log "could not lift the culprit's budget in $cg"; }
    done <"$CULPRIT_CGROUPS"
    rm -f "$CULPRIT_CGROUPS"
  fi
  if [ -f "$LAB_DIR/disk-queue" ]; then
    cat "$LAB_DIR/disk-queue" >"$QUEUE" || log "could not put back $QUEUE"
    rm -f "$LAB_DIR/disk-queue"
  fi
  if [ "$(cat "/sys/class/block/$(basename "$loop")/loop/dio" 2>/dev/null)" = 1 ]; then
    losetup --direct-io=off "$loop" || log "could not turn direct IO off on $loop"
  fi
  [ -d "$LAB_BLKIO" ] && { throttle "$LAB_BLKIO" 0 0 0 || log "could not lift the throttle in $LAB_BLKIO"; }
  throttle "$ROOT_BLKIO" 0 0 0 || log "could not lift the lab disk's limit in $ROOT_BLKIO"
  echo 0 >"$LAB_DIR/cni/delay-seconds" || true
  rm -rf --one-file-system "$LAB_DISK/stress"
  if pid=$(lab_alive incident-watchdog "$lab_here/incident.sh"); then
    if [ "$pid" != "$$" ]; then kill "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$LAB_DIR/pids/incident-watchdog.pid"
  return 0
}
# Set by each mode once it starts changing things: a failure part-way ends the incident.
end_on_failure() { trap 'status=$?; if [ $status -ne 0 ]; then log "failed part-way: ending the incident"; stop_all; fi; exit $status' EXIT; }

case $mode in
  stall)
    seconds=${2:-300}
    stop_all
    end_on_failure
    watchdog "$seconds"
    throttle "$LAB_BLKIO" 1 1 0
    log "stall: containerd's cgroup may do 1 read and 1 write per second on $loop ($dev) for at most ${seconds}s"
    ;;
  io)
    seconds=${2:-300}
    stop_all
    end_on_failure
    watchdog "$((seconds + 5))"
    throttle "$ROOT_BLKIO" "$LAB_DISK_IOPS" "$LAB_DISK_IOPS" "$LAB_DISK_BPS"
    mkdir -p "$LAB_DISK/stress"
    setsid stress-ng --io 2 --hdd 2 --temp-path "$LAB_DISK/stress" --timeout "${seconds}s" \
      >>"$LAB_DIR/logs/stress-ng.log" 2>&1 </dev/null &
    echo $! >"$LAB_DIR/pids/stress.pid"
    log "io: the lab disk ($loop) limited to ${LAB_DISK_IOPS} IOPS and $((LAB_DISK_BPS / 1024)) KiB/s of writes, stress-ng --io 2 --hdd 2 on it for at most ${seconds}s"
    ;;
  culprit)
    seconds=${2:-300} uid=${3:-}
    [ -n "$uid" ] || die "usage: hack/lab/incident.sh culprit SECONDS POD_UID"
    mapfile -t pids < <(writers "$uid")
    [ ${#pids[@]} -gt 0 ] || die "no lab writer runs in pod $uid on this machine"
    stop_all
    end_on_failure
    watchdog "$((seconds + 5))"
    losetup --direct-io=on "$loop"
    [ "$(cat "/sys/class/block/$(basename "$loop")/loop/dio")" = 1 ] || die "$loop refused direct IO"
    cat "$QUEUE" >"$LAB_DIR/disk-queue"
    echo "$LAB_DISK_QUEUE" >"$QUEUE"
    on=$(backing_disk)
    for pid in "${pids[@]}"; do
      cg=$ROOT_BLKIO$(sed -n 's/^[0-9]*:blkio://p' "/proc/$pid/cgroup")
      printf '%s %s\n' "$cg" "$on" "$cg" "$dev" >>"$CULPRIT_CGROUPS"
      throttle "$cg" 0 0 "$LAB_CULPRIT_BPS" "$on"
      # A limit far above the lab disk's speed: this kernel (6.12 on) counts a disk's IO in blkio.throttle.io_service_*
      # only once some limit was set on that disk, and the agent reads the pod's counters there.
      throttle "$cg" 0 0 $((1 << 40)) "$dev"
      kill -USR1 "$pid"
    done
    log "culprit: pod $uid's writer (pid ${pids[*]}) writes to the lab disk ($loop: direct IO, a queue of $LAB_DISK_QUEUE) at most $((LAB_CULPRIT_BPS / 1048576)) MiB/s on the machine's disk ($on), for at most ${seconds}s"
    ;;
  delay)
    seconds=${2:-8}
    stop_all
    end_on_failure
    watchdog 300
    echo "$seconds" >"$LAB_DIR/cni/delay-seconds"
    log "delay: each CNI ADD on the lab node waits ${seconds}s first (for at most 300s)"
    ;;
  stop)
    stop_all
    log "stopped: no throttle, no load, no CNI delay"
    ;;
  *) die "usage: hack/lab/incident.sh stall|io|culprit|delay|stop [SECONDS] [POD_UID]" ;;
esac
