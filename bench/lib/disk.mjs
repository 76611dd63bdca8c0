// Disk use of a directory tree: apparent bytes and allocated bytes (st_blocks × 512).
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

export function diskUsage(dir) {
  let bytes = 0;
  let allocated = 0;
  let files = 0;
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else {
        const s = statSync(p);
        bytes += s.size;
        allocated += s.blocks * 512;
        files++;
      }
    }
  };
  walk(dir);
  return { bytes, allocated, files };
}
