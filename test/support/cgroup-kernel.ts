// The kernel's side of the IO limit files over a crafted tree: a write to io.max or a blkio.throttle.*_device file
// is one line that changes the keys it names and keeps the rest, as blk-throttle does; a device whose limits are all
// "max" (v2) or 0 (v1) loses its line; the files read back in the kernel's format (v2: all four keys, in order). A
// write to a cgroup that is gone fails with ENOENT, as the kernel's does.
import { readFileSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import {
  IO_LIMIT_KEYS,
  parseIoMax,
  parseThrottleDevice,
  V1_THROTTLE_FILES,
  type CgroupFiles,
  type IoLimit,
  type IoLimitKey,
} from '../../src/agent/io-limits.js';

const V1_KEY = new Map(Object.entries(V1_THROTTLE_FILES).map(([key, file]) => [file, key as IoLimitKey]));

export function ioMaxText(devices: ReadonlyMap<string, Required<IoLimit>>): string {
  return [...devices]
    .map(([device, limit]) => `${device} ${IO_LIMIT_KEYS.map((k) => `${k}=${limit[k]}`).join(' ')}\n`)
    .join('');
}

export const throttleText = (devices: ReadonlyMap<string, number>): string =>
  [...devices].map(([device, value]) => `${device} ${value}\n`).join('');

export class CgroupKernel implements CgroupFiles {
  /** Every write, as "file line" (the file's name only). */
  readonly writes: string[] = [];
  /** A write this says true of fails with EIO before it changes anything (a fault to inject). */
  failing: (file: string, line: string, path: string) => boolean = () => false;

  read(path: string): string {
    return readFileSync(path, 'utf8');
  }

  write(path: string, line: string): void {
    if (!/^[^\n]*\n?$/.test(line)) throw new Error(`one line a write, not ${JSON.stringify(line)}`);
    const file = basename(path);
    const text = readFileSync(path, 'utf8'); // ENOENT when the cgroup is gone
    if (this.failing(file, line, path)) throw Object.assign(new Error(`EIO: write ${file}`), { code: 'EIO' });
    this.writes.push(`${file} ${line.trimEnd()}`);
    const [device, ...pairs] = line.trim().split(' ');
    if (!device || pairs.length === 0) throw new Error(`EINVAL: ${JSON.stringify(line)}`);
    if (file === 'io.max') {
      const devices = parseIoMax(text, path);
      const limit = devices.get(device) ?? { rbps: 'max', wbps: 'max', riops: 'max', wiops: 'max' };
      for (const pair of pairs) {
        const [key, value] = pair.split('=') as [IoLimitKey, string];
        if (!IO_LIMIT_KEYS.includes(key) || !/^(max|[1-9]\d*)$/.test(value))
          throw new Error(`EINVAL: ${pair}`);
        limit[key] = value === 'max' ? 'max' : Number(value);
      }
      if (IO_LIMIT_KEYS.every((k) => limit[k] === 'max')) devices.delete(device);
      else devices.set(device, limit);
      writeFileSync(path, ioMaxText(devices));
      return;
    }
    if (!V1_KEY.has(file) || pairs.length !== 1 || !/^\d+$/.test(pairs[0]!))
      throw new Error(`EINVAL: ${file} ${JSON.stringify(line)}`);
    const devices = parseThrottleDevice(text, path);
    const value = Number(pairs[0]);
    if (value === 0) devices.delete(device);
    else devices.set(device, value);
    writeFileSync(path, throttleText(devices));
  }
}
