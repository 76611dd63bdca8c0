// The least work a durable push of this queue's contract does, written out with nothing else, as a
// bound for the fsync-bound cells (bench/experiments/group-floor.mjs, the A/B rounds of
// bench/lib/ab.mjs):
//   - a promise per push, resolved only once its record is durable (one fdatasync per batch);
//   - the payload copied when push() is called (the caller may reuse its buffer at once), into a
//     CRC-framed record (recovery must tell a whole record from a torn one): the engine's own
//     encodeFrame, the same 148 bytes per 128 B payload as the raw loops and LogStore;
//   - the batch gathered over a microtask while no sync is in flight, then one write(2) and one
//     fdatasync; what is pushed while it syncs is the next batch (`group`);
//   - a file zero-filled and synced before the clock starts (LogStore preallocates 4 MiB ahead).
// No seq bookkeeping beyond a counter, no capacity, no consumer side, no failure handling.
import { closeSync, fdatasync, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { encodeFrame } from '../../dist/log/frame.js';
import { FRAME_HEADER_BYTES, RECORD_ITEM } from '../../dist/log/format.js';
import { pushOnly } from './queue-work.mjs';

const SETTLED = Promise.resolve();

export class FloorLog {
  #fd;
  #mainThread;
  #buf = Buffer.allocUnsafe(1 << 20);
  #len = 0;
  #pos = 0;
  #seq = 1;
  #resolves = [];
  #seqs = [];
  #inFlight = false;
  #scheduled = false;

  /** `mainThread`: fdatasyncSync, blocking the event loop as better-sqlite3 and `blockingSync` do. */
  constructor(fd, mainThread) {
    this.#fd = fd;
    this.#mainThread = mainThread;
  }

  push(payload) {
    return new Promise((resolve) => {
      const seq = this.#seq++;
      this.#len = encodeFrame(this.#buf, this.#len, seq, RECORD_ITEM, payload);
      this.#resolves.push(resolve);
      this.#seqs.push(seq);
      if (!this.#inFlight && !this.#scheduled) {
        this.#scheduled = true;
        void SETTLED.then(this.#flush);
      }
    });
  }

  #flush = () => {
    this.#scheduled = false;
    if (this.#inFlight || this.#resolves.length === 0) return;
    const resolves = this.#resolves;
    const seqs = this.#seqs;
    this.#resolves = [];
    this.#seqs = [];
    writeSync(this.#fd, this.#buf, 0, this.#len, this.#pos);
    this.#pos += this.#len;
    this.#len = 0;
    const done = () => {
      this.#inFlight = false;
      for (let i = 0; i < resolves.length; i++) resolves[i](seqs[i]);
      this.#flush();
    };
    this.#inFlight = true;
    if (this.#mainThread) {
      fdatasyncSync(this.#fd);
      done();
    } else {
      fdatasync(this.#fd, (error) => {
        if (error) throw error;
        done();
      });
    }
  };
}

/**
 * `producers` callers each awaiting `push` in a loop over a FloorLog, for `budgetMs` or `records`
 * pushes; returns pushes per second. The file holds room for `records` frames of `payload`.
 */
export async function floorRate(scratch, { producers, payload, records, budgetMs, mainThread = false }) {
  const path = join(scratch, `floor-${process.pid}-${Math.floor(performance.now() * 1000)}.bin`);
  const fd = openSync(path, 'w+', 0o600);
  try {
    const bytes = records * (FRAME_HEADER_BYTES + payload.length);
    const zeros = Buffer.alloc(1 << 20);
    for (let off = 0; off < bytes; off += zeros.length) writeSync(fd, zeros, 0, Math.min(zeros.length, bytes - off), off);
    fdatasyncSync(fd);
    const r = await pushOnly(new FloorLog(fd, mainThread), { producers, payload, count: records, budgetMs });
    return r.msgs / r.seconds;
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}
