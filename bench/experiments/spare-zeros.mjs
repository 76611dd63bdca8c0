// Whether the zeros of preallocation can leave the flush path by going to another file: the raw
// `group` loop (64 frames of 148 B per write(2), then fdatasyncSync) over
//   prefill   a file zero-filled and synced before the clock starts (the `limits` reference)
//   inband    an empty file that gets 4 MiB of zeros ahead of the writes whenever they come near
//             its end, flushed by the next fdatasync (as a new LogStore's active segment)
//   spare     prefill, and the same zeros written to a second file (the next segment, made ready
//             while this one fills), each 4 MiB step fdatasynced there in the threadpool
//   unsynced  the same as spare without those syncs: the kernel writes the zeros back when it
//             chooses, which a cell of a few seconds does not see (a roll would have to sync them)
// Prints the rate, the median sync and the syncs over 5 times the median with their time.
// Usage: node bench/experiments/spare-zeros.mjs [ms=2000] [rounds=3]
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { median } from '../lib/stats.mjs';
import { INBAND_STEP_BYTES, inbandZeros, zeroFill } from '../lib/raw.mjs';

const ms = Number(process.argv[2] ?? 2000);
const rounds = Number(process.argv[3] ?? 3);
const BATCH = Buffer.alloc(64 * 148, 1);
const PREFILL_BYTES = 256 * 1024 * 1024;

async function cell(dir, mode) {
  const fd = openSync(join(dir, `${mode}.log`), 'w+', 0o600);
  const spare = openSync(join(dir, `${mode}.spare`), 'w+', 0o600);
  let fileBytes = 0;
  if (mode !== 'inband') {
    fileBytes = zeroFill(fd, 0, PREFILL_BYTES);
    fdatasyncSync(fd);
  }
  let spareBytes = 0;
  let spareSyncs = 0;
  let spareSynced = 0;
  let nextStep = INBAND_STEP_BYTES;
  let pos = 0;
  let cycles = 0;
  const times = [];
  const t0 = performance.now();
  try {
    // A zero-filled file ends the cell at its end rather than grow (a disk faster than 1 M frames/s).
    while (performance.now() - t0 < ms && (mode === 'inband' || pos + BATCH.length <= fileBytes)) {
      writeSync(fd, BATCH, 0, BATCH.length, pos);
      pos += BATCH.length;
      if (mode === 'inband') fileBytes = inbandZeros(fd, fileBytes, pos, BATCH.length);
      if ((mode === 'spare' || mode === 'unsynced') && pos >= nextStep) {
        nextStep += INBAND_STEP_BYTES;
        spareBytes = zeroFill(spare, spareBytes, spareBytes + INBAND_STEP_BYTES);
        if (mode === 'spare') {
          spareSyncs++;
          fdatasync(spare, () => spareSynced++);
        }
      }
      const at = performance.now();
      fdatasyncSync(fd);
      times.push(performance.now() - at);
      cycles++;
      // Let the spare's sync callbacks run now and then.
      if (mode === 'spare' && (cycles & 15) === 0) await new Promise((r) => setImmediate(r));
    }
    const wallMs = performance.now() - t0;
    while (spareSynced < spareSyncs) await new Promise((r) => setTimeout(r, 5));
    const mid = median(times);
    const slow = times.filter((t) => t > 5 * mid);
    return `${mode.padEnd(9)} ${((cycles * 64) / wallMs).toFixed(0)} k/s; median sync ${(mid * 1000).toFixed(0)} µs; ${slow.length} over 5× the median, ${slow.reduce((a, b) => a + b, 0).toFixed(0)} ms of ${wallMs.toFixed(0)} ms`;
  } finally {
    closeSync(fd);
    closeSync(spare);
  }
}

const dir = mkdtempSync(join(tmpdir(), 'pq-spare-zeros-'));
try {
  for (let r = 0; r < rounds; r++) for (const mode of ['prefill', 'inband', 'spare', 'unsynced']) console.log(await cell(dir, mode));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
