#!/usr/bin/env bash
# hack/lab/incident.sh MODE [SECONDS]: makes the lab node's sandbox creation slow for real, in one of three ways,
# each ending by itself after SECONDS (default 300) or at `hack/lab/incident.sh stop`:
#   stall  the deterministic incident: containerd's own cgroup may do 1 read and 1 write per second on the lab disk
#          (blkio throttle, cgroup v1). containerd's RunPodSandbox then blocks in its own fsyncs and reads, which a
#          cancelled request cannot interrupt, so kubelet's retry meets "failed to reserve sandbox name".
#   io     the incident as it happens: bounded stress-ng --io/--hdd load, as in the incident's published
#          reproduction, on a lab disk given a small volume's budget (LAB_DISK_IOPS, 10, read and write, and
#          LAB_DISK_BPS, 1 MiB/s, write). The budget is set in the root blkio cgroup, which cgroup v1 does not pass
#          down: it binds the load and the kernel's writeback, not containerd, whose own IO is slowed by waiting
#          behind them on the same disk (its fsyncs need the filesystem's journal, full of the load's writes).
#   delay  the cheap case: the CNI ADD waits SECONDS (default 8) first. containerd cancels it at kubelet's deadline
#          and releases the name, so kubelet reports only "context deadline exceeded".
# Only the lab's loop device and the lab's own cgroup are throttled; nothing else on the machine is.
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

throttle() { # cgroup-dir read_iops write_iops write_bps (0 lifts)
  echo "$dev $2" >"$1/blkio.throttle.read_iops_device"
  echo "$dev $3" >"$1/blkio.throttle.write_iops_device"
  echo "$dev $4" >"$1/blkio.throttle.write_bps_device"
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
  *) die "usage: hack/lab/incident.sh stall|io|delay|stop [SECONDS]" ;;
esac
