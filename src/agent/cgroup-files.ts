// Pure parsers for the cgroup files the node agent reads for IO attribution. Like proc.ts, each throws
// ProcParseError, naming the file and the line, on content it cannot trust: that cgroup's figures are then unknown,
// never zero.
import { ProcParseError } from './proc.js';

/** What a cgroup did on one device: bytes and operations read and written (discards are not counted). */
export interface IoCounters {
  readBytes: number;
  writeBytes: number;
  reads: number;
  writes: number;
}

/** A cgroup's counters by device, keyed "MAJ:MIN"; a device the cgroup never did IO on has no entry. */
export type DeviceCounters = Map<string, IoCounters>;

export const NO_IO: IoCounters = Object.freeze({ readBytes: 0, writeBytes: 0, reads: 0, writes: 0 });

/**
 * One io.stat line as the kernel prints it (blkcg_print_one_stat: one format string, so the keys' order is fixed),
 * dbytes= and dios= from 5.x on, then whatever the IO policies add (io.cost's cost.*, io.latency's depth= and
 * avg_lat=), let be. One regular expression a line: the agent parses thousands of these a second, and under
 * --jitless a split into fields and a closure per field cost several times as much.
 */
const IO_STAT_LINE =
  /(\d+:\d+) rbytes=(\d+) wbytes=(\d+) rios=(\d+) wios=(\d+)(?: dbytes=\d+ dios=\d+)?(?: [a-z][\w.]*=[^ =\n]+)*\n/y;

/** cgroup v2 io.stat: "8:0 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0" per device. */
export function parseIoStat(text: string, file = 'io.stat'): DeviceCounters {
  const devices: DeviceCounters = new Map();
  IO_STAT_LINE.lastIndex = 0;
  while (IO_STAT_LINE.lastIndex < text.length) {
    const at = IO_STAT_LINE.lastIndex;
    const m = IO_STAT_LINE.exec(text);
    // The digits are the regular expression's: left to check is their size (a sum a double holds exactly: so does each).
    const device = m?.[1] ?? '';
    const readBytes = Number(m?.[2]);
    const writeBytes = Number(m?.[3]);
    const reads = Number(m?.[4]);
    const writes = Number(m?.[5]);
    if (!m || devices.has(device) || !Number.isSafeInteger(readBytes + writeBytes + reads + writes)) {
      const line = text.slice(at).split('\n', 1)[0] ?? '';
      const number = text.slice(0, at).split('\n').length;
      const cut = !text.endsWith('\n') && at + line.length === text.length;
      throw new ProcParseError(
        file,
        cut
          ? `line ${number} is cut short (no newline)`
          : `line ${number} is not one "MAJ:MIN rbytes=… wbytes=… rios=… wios=…": ${JSON.stringify(line)}`,
      );
    }
    devices.set(device, { readBytes, writeBytes, reads, writes });
  }
  return devices;
}

const PRESSURE =
  /^some avg10=(\d{1,3}\.\d\d) avg60=\d{1,3}\.\d\d avg300=\d{1,3}\.\d\d total=\d+\n(?:full avg10=\d{1,3}\.\d\d avg60=\d{1,3}\.\d\d avg300=\d{1,3}\.\d\d total=\d+\n)?$/;

/**
 * A cgroup's io.pressure "some avg10", from the whole file ("some avg10=%lu.%02lu avg60=… avg300=… total=%llu",
 * then the same for "full"). proc.ts's parsePressure reads the node's file just as strictly, but field by field:
 * this is the same check in one regular expression, for the thousands of pod cgroups read each second.
 */
export function parseSomeAvg10(text: string, file = 'io.pressure'): number {
  const avg10 = Number(PRESSURE.exec(text)?.[1]);
  if (!(avg10 <= 100))
    throw new ProcParseError(
      file,
      `is not "some avg10=… avg60=… avg300=… total=…" and "full …": ${JSON.stringify(text.slice(0, 120))}`,
    );
  return avg10;
}

/** Read and Write of each device in a cgroup v1 blkio.throttle.* file. */
export type ReadWrite = Map<string, { read: number; write: number }>;

/**
 * One device's lines, in the order the kernel prints them (blkg_prfill_rwstat: Read, Write, Sync, Async, Discard
 * from 4.19 on, Total), all of the same device. One regular expression a device, not one a line: 100 pods' two
 * files under --jitless cost 14 ms of CPU parsed line by line.
 */
const BLKIO_DEVICE =
  /(\d+:\d+) Read (\d+)\n\1 Write (\d+)\n\1 Sync \d+\n\1 Async \d+\n(?:\1 Discard \d+\n)?\1 Total \d+\n/y;
const BLKIO_TOTAL = /Total \d+\n$/y;

/**
 * cgroup v1 blkio.throttle.io_service_bytes(_recursive) and io_serviced(_recursive): per device, lines
 * "8:0 Read N", Write, Sync, Async, Discard (newer kernels) and Total, then one line "Total N" for all. Only Read
 * and Write are kept: Total counts discards too. The final Total is required: without it the file was cut short.
 */
export function parseBlkioThrottle(text: string, file: string): ReadWrite {
  const devices: ReadWrite = new Map();
  if (!text.endsWith('\n')) throw new ProcParseError(file, 'the last line is cut short (no newline)');
  BLKIO_DEVICE.lastIndex = 0;
  for (;;) {
    const at = BLKIO_DEVICE.lastIndex;
    const m = BLKIO_DEVICE.exec(text);
    const device = m?.[1] ?? '';
    const read = Number(m?.[2]);
    const write = Number(m?.[3]);
    if (m && !devices.has(device) && Number.isSafeInteger(read + write)) {
      devices.set(device, { read, write });
      continue;
    }
    BLKIO_TOTAL.lastIndex = at;
    if (!m && BLKIO_TOTAL.test(text)) return devices;
    const line = text.slice(0, at).split('\n').length;
    throw new ProcParseError(
      file,
      `line ${line} does not start one device's "MAJ:MIN Read|Write|Sync|Async|[Discard|]Total N" lines, or the final "Total N": ${JSON.stringify(text.slice(at).split('\n', 1)[0])}`,
    );
  }
}

/** A v1 cgroup's counters from its bytes and its ops file. */
export function blkioCounters(bytes: ReadWrite, ops: ReadWrite): DeviceCounters {
  const devices: DeviceCounters = new Map();
  for (const device of new Set([...bytes.keys(), ...ops.keys()])) {
    const b = bytes.get(device);
    const o = ops.get(device);
    devices.set(device, {
      readBytes: b?.read ?? 0,
      writeBytes: b?.write ?? 0,
      reads: o?.read ?? 0,
      writes: o?.write ?? 0,
    });
  }
  return devices;
}

/** Adds `more` into `into`, device by device (a v1 pod's own counters and its containers'). */
export function addCounters(into: DeviceCounters, more: DeviceCounters): void {
  for (const [device, c] of more) {
    const was = into.get(device) ?? NO_IO;
    into.set(device, {
      readBytes: was.readBytes + c.readBytes,
      writeBytes: was.writeBytes + c.writeBytes,
      reads: was.reads + c.reads,
      writes: was.writes + c.writes,
    });
  }
}
