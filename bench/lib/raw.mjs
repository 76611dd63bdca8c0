// The physical limits, measured with node:fs directly: what any log on this disk can do.
// Every function returns records per second for frames of `frameBytes` bytes.
import { closeSync, fdatasyncSync, fdatasync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const fdatasyncAsync = promisify(fdatasync);
/** Zeros written ahead at a time under in-band preallocation: LogStore's step. */
export const INBAND_STEP_BYTES = 4 * 1024 * 1024;
const ZEROS = Buffer.alloc(1 << 20);

/** Frame header bytes: a batch needs room for one more header past its end, as LogStore checks. */
const FRAME_HEADER_BYTES = 20;

/** Write zeros over [from, to) of `fd` with `write` (node:fs's writeSync by default); returns `to`. */
export function zeroFill(fd, from, to, write = writeSync) {
  for (let off = from; off < to; off += ZEROS.length) write(fd, ZEROS, 0, Math.min(ZEROS.length, to - off), off);
  return to;
}

/**
 * In-band preallocation, as LogStore's active segment gets it: once a batch of `batchBytes` that
 * ended at `pos` leaves less than another such batch (and a frame header) before the file's end
 * `fileBytes`, zeros go up to INBAND_STEP_BYTES past `pos`. Returns the file's size after.
 */
export function inbandZeros(fd, fileBytes, pos, batchBytes, write = writeSync) {
  if (fileBytes - pos >= batchBytes + FRAME_HEADER_BYTES) return fileBytes;
  return zeroFill(fd, Math.max(fileBytes, pos), pos + INBAND_STEP_BYTES, write);
}

function withFile(dir, preallocateBytes, body) {
  const path = join(dir, `raw-${process.pid}-${Math.floor(performance.now() * 1000)}.bin`);
  const fd = openSync(path, 'w+', 0o600);
  try {
    if (preallocateBytes > 0) {
      // Zero-fill and sync once, so later overwrites do not change the file's size (docs/internals/engine.md, "Write path").
      zeroFill(fd, 0, preallocateBytes);
      fdatasyncSync(fd);
    }
    return body(fd);
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

/** Raw `fs.writeSync` of pre-framed records, `batch` frames per write, no sync. */
export function rawBatchedAppend(dir, { frameBytes, records, batch = 64, budgetMs = Infinity }) {
  const buf = Buffer.alloc(frameBytes * batch, 7);
  return withFile(dir, 0, (fd) => {
    const t0 = performance.now();
    const deadline = t0 + budgetMs;
    let pos = 0;
    let i = 0;
    while (i < records && performance.now() < deadline) {
      writeSync(fd, buf, 0, buf.length, pos);
      pos += buf.length;
      i += batch;
    }
    return i / ((performance.now() - t0) / 1000);
  });
}

/**
 * Raw write + fdatasync, `batch` frames per sync (1 = one sync per record), either appending to a
 * growing file or overwriting a zero-filled, synced file (`preallocate`; `'inband'`: zeros written
 * 4 MiB ahead of the writes as they come near the file's end, as LogStore's active segment gets
 * them, and flushed by the next fdatasync). Uses the async fdatasync, as an engine that keeps the
 * event loop free must (unless `mainThread`).
 */
export async function rawSyncLoop(
  dir,
  { frameBytes, records, batch = 1, preallocate = false, budgetMs = Infinity, latencies, mainThread = false },
) {
  const buf = Buffer.alloc(frameBytes * batch, 7);
  const bytes = buf.length * Math.ceil(records / batch);
  const path = join(dir, `raw-sync-${process.pid}-${Math.floor(performance.now() * 1000)}.bin`);
  const fd = openSync(path, 'w+', 0o600);
  try {
    if (preallocate === true) {
      zeroFill(fd, 0, bytes);
      fdatasyncSync(fd);
    }
    let fileBytes = 0;
    const t0 = performance.now();
    const deadline = t0 + budgetMs;
    let pos = 0;
    let i = 0;
    while (i < records && performance.now() < deadline) {
      const t = performance.now();
      writeSync(fd, buf, 0, buf.length, pos);
      pos += buf.length;
      if (preallocate === 'inband') fileBytes = inbandZeros(fd, fileBytes, pos, buf.length);
      // `mainThread`: fdatasyncSync, blocking the event loop as better-sqlite3 does (a reference
      // point for the cost of the threadpool round trip, not a limit an async engine can reach).
      if (mainThread) fdatasyncSync(fd);
      else await fdatasyncAsync(fd);
      latencies?.add(performance.now() - t);
      i += batch;
    }
    return i / ((performance.now() - t0) / 1000);
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

export function tempDir(base) {
  return mkdtempSync(join(base, 'pq-raw-'));
}
