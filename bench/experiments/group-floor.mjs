// How close can any queue with this contract come to the raw loop, under `group`, 64 producers,
// 128 B, push only? The "floor" below is the least work the contract asks for, written out with
// nothing else:
//   - a promise per push, resolved only once its record is durable (one fdatasync per batch);
//   - the payload copied when push() is called (the caller may reuse its buffer at once), into a
//     CRC-framed record (recovery must tell a whole record from a torn one): the engine's own
//     encodeFrame, the same 148 bytes per record as the raw loops and LogStore;
//   - the batch gathered over a microtask while no sync is in flight, then one write(2) and one
//     fdatasync; what is pushed while it syncs is the next batch;
//   - a file zero-filled and synced before the clock starts (LogStore preallocates 4 MiB ahead).
// No seq bookkeeping beyond a counter, no capacity, no consumer side, no failure handling.
//
// Contestants, every one once per round in a rotating order (bench/lib/ab.mjs):
//   raw-async / raw-main   write 64 pre-built frames + fdatasync (async / on the main thread)
//   floor / floor-main     the floor above (async fdatasync / fdatasyncSync)
//   logstore / -blocking   the queue over LogStore `group` (default / blockingSync)
//   sqlite                 better-sqlite3, WAL, synchronous FULL, 64 inserts per commit
//   level                  classic-level, batches of 64 written with sync
// The rates are medians over the rounds; each ratio is the median of the per-round ratios.
// Usage: npm run build && node bench/experiments/group-floor.mjs [rounds=7] [ms=600]
import { closeSync, fdatasync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Builder, LogStore } from '../../dist/index.js';
import { encodeFrame } from '../../dist/log/frame.js';
import { RECORD_ITEM } from '../../dist/log/format.js';
import { runAbGroup } from '../lib/ab.mjs';
import { levelPeer, sqlitePeer } from '../lib/peers.mjs';
import { pushOnly } from '../lib/queue-work.mjs';
import { rawSyncLoop } from '../lib/raw.mjs';
import { median } from '../lib/stats.mjs';

const rounds = Number(process.argv[2] ?? 7);
const budgetMs = Number(process.argv[3] ?? 600);
const PRODUCERS = 64;
const PAYLOAD = new Uint8Array(128).fill(7);
const FRAME_BYTES = 20 + 128;
const SETTLED = Promise.resolve();

/** The least a `group` push of this contract does (see the header). */
class FloorLog {
  #fd;
  #blocking;
  #buf = Buffer.allocUnsafe(1 << 20);
  #len = 0;
  #pos = 0;
  #seq = 1;
  #resolves = [];
  #seqs = [];
  #inFlight = false;
  #scheduled = false;

  constructor(fd, blocking) {
    this.#fd = fd;
    this.#blocking = blocking;
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
    if (this.#blocking) {
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

async function floorRun(scratch, ms, blocking) {
  const path = join(scratch, `floor-${process.pid}-${Math.floor(performance.now() * 1000)}.bin`);
  const fd = openSync(path, 'w+', 0o600);
  try {
    // Room for 600 k records a second, zero-filled and synced before the clock starts.
    const bytes = Math.ceil((600_000 * FRAME_BYTES * ms) / 1000);
    const zeros = Buffer.alloc(1 << 20);
    for (let off = 0; off < bytes; off += zeros.length) writeSync(fd, zeros, 0, Math.min(zeros.length, bytes - off), off);
    fdatasyncSync(fd);
    const r = await pushOnly(new FloorLog(fd, blocking), { producers: PRODUCERS, payload: PAYLOAD, count: Math.floor(bytes / FRAME_BYTES), budgetMs: ms });
    return r.msgs / r.seconds;
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

async function logStoreRun(scratch, ms, blockingSync) {
  const dir = mkdtempSync(join(scratch, 'floor-log-'));
  try {
    const [tx] = await new Builder(await LogStore.open(join(dir, 'q'), { blockingSync })).durability('group').open();
    try {
      const r = await pushOnly(tx, { producers: PRODUCERS, payload: PAYLOAD, count: 2_000_000, budgetMs: ms });
      return r.msgs / r.seconds;
    } finally {
      await tx.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const raw = (mainThread) => (s, ms) => rawSyncLoop(s, { frameBytes: FRAME_BYTES, records: 2_000_000, batch: 64, preallocate: true, budgetMs: ms, mainThread });
const BEST_RAW = ['raw-async', 'raw-main'];
const group = {
  id: 'group-floor',
  contestants: {
    'raw-async': raw(false),
    'raw-main': raw(true),
    floor: (s, ms) => floorRun(s, ms, false),
    'floor-main': (s, ms) => floorRun(s, ms, true),
    logstore: (s, ms) => logStoreRun(s, ms, false),
    'logstore-blocking': (s, ms) => logStoreRun(s, ms, true),
    sqlite: async (s, ms) => {
      const r = await sqlitePeer(s, { durable: true, mode: 'perCommit', batch: 64, payload: Buffer.from(PAYLOAD), count: 2_000_000, budgetMs: ms });
      return r.msgs / r.seconds;
    },
    level: async (s, ms) => {
      const r = await levelPeer(s, { sync: true, mode: 'perCommit', batch: 64, payload: Buffer.from(PAYLOAD), count: 2_000_000, budgetMs: ms });
      return r.msgs / r.seconds;
    },
  },
  ratios: {
    'floor / best raw': ['floor', BEST_RAW],
    'floor / raw-async': ['floor', 'raw-async'],
    'floor-main / best raw': ['floor-main', BEST_RAW],
    'logstore / best raw': ['logstore', BEST_RAW],
    'logstore / floor': ['logstore', 'floor'],
    'logstore-blocking / floor-main': ['logstore-blocking', 'floor-main'],
    'floor / sqlite': ['floor', 'sqlite'],
    'floor-main / sqlite': ['floor-main', 'sqlite'],
    'logstore / sqlite': ['logstore', 'sqlite'],
    'floor / level': ['floor', 'level'],
    'floor-main / level': ['floor-main', 'level'],
    'logstore / level': ['logstore', 'level'],
    'logstore-blocking / sqlite': ['logstore-blocking', 'sqlite'],
    'logstore-blocking / level': ['logstore-blocking', 'level'],
    'sqlite / best raw': ['sqlite', BEST_RAW],
  },
};

const scratch = mkdtempSync(join(tmpdir(), 'pq-floor-'));
try {
  const res = await runAbGroup(group, { scratch, rounds, budgetMs, onRound: (r) => process.stderr.write(`round ${r + 1}/${rounds}\n`) });
  const k = (x) => `${(x / 1000).toFixed(1)} k/s`;
  console.log(`group, ${PRODUCERS} producers, 128 B, push only: ${rounds} rounds of ${budgetMs} ms (median, min–max)`);
  for (const [name, v] of Object.entries(res.rates)) console.log(`  ${name.padEnd(20)} ${k(median(v)).padStart(11)}  (${k(Math.min(...v))} – ${k(Math.max(...v))})`);
  for (const [id, v] of Object.entries(res.ratios)) console.log(`  ${id.padEnd(32)} ${median(v).toFixed(2)}  (${Math.min(...v).toFixed(2)} – ${Math.max(...v).toFixed(2)})`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
