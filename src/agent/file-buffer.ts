import { closeSync, openSync, readSync } from 'node:fs';

/**
 * Whole files read synchronously into one reused buffer: the agent's way of reading /proc and the cgroup tree
 * every second for as little CPU as it can (docs/adr/0011-lean-agent.md). Synchronous is right for these files:
 * procfs and cgroupfs answer from kernel memory, never from a disk, so even on a saturated node a read does not
 * wait on the IO it measures.
 */
export class FileBuffer {
  /** The bytes of the last file read (up to the length read() returned); replaced when a file needs more room. */
  bytes = Buffer.allocUnsafe(16 * 1024);

  /**
   * Reads a whole file into `bytes` (these files have no size to go by); returns its length. `shortReadEnds`: the
   * file is one record (PID/stat, PID/wchan, a cgroup's io.stat), which the kernel returns whole to one read that
   * has room for it.
   */
  read(path: string, shortReadEnds = false): number {
    const fd = openSync(path, 'r');
    try {
      let length = 0;
      for (;;) {
        if (length === this.bytes.length) {
          const bigger = Buffer.allocUnsafe(this.bytes.length * 2);
          this.bytes.copy(bigger, 0, 0, length);
          this.bytes = bigger;
        }
        const room = this.bytes.length - length;
        const n = readSync(fd, this.bytes, length, room, null);
        length += n;
        // For a one-record file a short read is the end, and saves the read that would return 0 (a quarter of the
        // agent's system calls). Not for the node's files: diskstats is a seq_file that hands out about a page per
        // read, so on a node with more than ~40 devices a short read is not the end, and the rest went unread.
        if (n === 0 || (shortReadEnds && n < room)) return length;
      }
    } finally {
      closeSync(fd);
    }
  }

  text(path: string, shortReadEnds = false): string {
    const length = this.read(path, shortReadEnds); // first: the read may replace the buffer with a bigger one
    return this.bytes.toString('utf8', 0, length);
  }
}
