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
// No seq bookkeeping beyond a counter, no capacity, no failure handling.
//
// FloorQueue adds the least consumer side of the README's loop under the default ack policy
// (`lazy`): items become reservable once their batch is durable; `reserve()` returns a promise of
// an item; `ack()` writes one CRC-framed ACK record (36 bytes, as LogStore's for one seq) to a
// second file before it resolves, and every 4096 acks starts an fdatasync of that file that no
// ack waits for. Delivery counts are exact, as LogStore's are (docs/internals/core.md, "Delivery
// counts and dead letters"): before an item is handed out, a MARK record of the first-delivery
// bound past it (32 bytes, as LogStore's) is written to that file, one for the items handed out
// together. No leases, redelivery, read-ahead bound or tail cache.
import { closeSync, fdatasync, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { encodeFrame } from '../../dist/stores/log/engine/frame.js';
import {
  FRAME_HEADER_BYTES,
  FRAME_OFF_LENGTH,
  MARK_RECORD_HEADER_BYTES,
  RECORD_ACK,
  RECORD_ITEM,
  RECORD_MARK,
  readU32,
  writeU64,
} from '../../dist/stores/log/engine/format.js';
import { pushOnly } from './queue-work.mjs';
import { inbandZeros, zeroFill } from './raw.mjs';

const SETTLED = Promise.resolve();

export class FloorLog {
  #fd;
  #mainThread;
  #buf = Buffer.allocUnsafe(1 << 20);
  /** The batch being gathered is buf[start, len). */
  #start = 0;
  #len = 0;
  #pos = 0;
  #seq = 1;
  #resolves = [];
  #seqs = [];
  #inFlight = false;
  #scheduled = false;
  #io;
  /** With in-band preallocation: the file's size, the write position plus the zeros ahead of it. */
  #fileBytes = -1;
  /** Told of every durable batch: its buffer, where it starts and ends there, and its seqs (FloorQueue). */
  durable;
  /**
   * Gather each batch over a turn of the event loop (setImmediate) rather than a microtask, so
   * that timers and I/O run between two flushes: with `mainThread`, what LogStore's default
   * (`blockingSync: 'auto'`) grants a busy loop, one flush of stall at most. Off by default: the
   * floor of the A/B rounds and the `limits` section never yields between its flushes.
   */
  turnPerFlush = false;

  /**
   * `mainThread`: fdatasyncSync, blocking the event loop as better-sqlite3 and `blockingSync` do.
   * `inband`: the file starts empty and, as LogStore's active segment does, gets 4 MiB of zeros
   * ahead of its write position whenever a batch comes within reach of its end; the next
   * fdatasync flushes them (otherwise the caller zero-fills the file before the clock starts).
   * `io`: the write(2) (zeros included) and main-thread fdatasync it calls, node:fs's unless
   * replaced (by ones that do nothing, to time the floor's own work alone).
   */
  constructor(fd, mainThread, inband = false, io = { writeSync, fdatasyncSync }) {
    this.#fd = fd;
    this.#mainThread = mainThread;
    if (inband) this.#fileBytes = 0;
    this.#io = io;
  }

  push(payload) {
    return new Promise((resolve) => {
      const seq = this.#seq++;
      this.#len = encodeFrame(this.#buf, this.#len, seq, RECORD_ITEM, payload);
      this.#resolves.push(resolve);
      this.#seqs.push(seq);
      if (!this.#inFlight && !this.#scheduled) {
        this.#scheduled = true;
        if (this.turnPerFlush) setImmediate(this.#flush);
        else void SETTLED.then(this.#flush);
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
    const buf = this.#buf;
    const start = this.#start;
    const end = this.#len;
    this.#io.writeSync(this.#fd, buf, start, end - start, this.#pos);
    this.#pos += end - start;
    if (this.#fileBytes >= 0) this.#fileBytes = inbandZeros(this.#fd, this.#fileBytes, this.#pos, end - start, this.#io.writeSync);
    if (this.durable === undefined) {
      this.#len = 0;
    } else if (buf.length - end < 1 << 19) {
      // A FloorQueue's items are views into the buffer: a new one once this one runs low.
      this.#buf = Buffer.allocUnsafe(1 << 20);
      this.#start = this.#len = 0;
    } else {
      this.#start = end;
    }
    const done = () => {
      this.#inFlight = false;
      for (let i = 0; i < resolves.length; i++) resolves[i](seqs[i]);
      this.durable?.(buf, start, end, seqs);
      this.#flush();
    };
    this.#inFlight = true;
    if (this.#mainThread) {
      this.#io.fdatasyncSync(this.#fd);
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
 * pushes; returns pushes per second. The file holds room for `records` frames of `payload`, zero-filled
 * before the clock starts, or (`inband`) grows with zeros ahead of the writes as LogStore's does.
 */
export async function floorRate(
  scratch,
  { producers, payload, records, budgetMs, mainThread = false, inband = false, turnPerFlush = false },
) {
  const path = join(scratch, `floor-${process.pid}-${Math.floor(performance.now() * 1000)}.bin`);
  const fd = openSync(path, 'w+', 0o600);
  try {
    if (!inband) {
      zeroFill(fd, 0, records * (FRAME_HEADER_BYTES + payload.length));
      fdatasyncSync(fd);
    }
    const log = new FloorLog(fd, mainThread, inband);
    log.turnPerFlush = turnPerFlush;
    const r = await pushOnly(log, { producers, payload, count: records, budgetMs });
    return r.msgs / r.seconds;
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

const ACK_RECORD_BYTES = FRAME_HEADER_BYTES + 16;
const MARK_RECORD_BYTES = FRAME_HEADER_BYTES + MARK_RECORD_HEADER_BYTES;
const ACK_SYNC_EVERY = 4096;

class FloorItem {
  constructor(queue, seq, bytes) {
    this.queue = queue;
    this.seq = seq;
    this.bytes = bytes;
  }

  ack() {
    return this.queue.ack(this.seq);
  }
}

/** FloorLog's pushes plus the least consumer side of the README's loop (see the header). */
export class FloorQueue {
  #log;
  #ackFd;
  #ackBuf = Buffer.alloc(ACK_RECORD_BYTES);
  #markBuf = Buffer.alloc(MARK_RECORD_BYTES);
  #markPayload = new Uint8Array(MARK_RECORD_HEADER_BYTES);
  #payload = new Uint8Array(16);
  #ackPos = 0;
  #recordSeq = 0;
  #acks = 0;
  #ready = [];
  #head = 0;
  #waiters = [];
  /** Acks of this turn waiting for their one write (`ackInTurn`), and the promise they share. */
  #turnSeqs = [];
  #turnDone;
  #turnResolve;
  /** Set before the files close: consumers left behind with the queue write nothing more. */
  closed = false;

  /** `mainThread`: the log's batch syncs on the calling thread (FloorLog). */
  constructor(fd, ackFd, mainThread = false) {
    this.#ackFd = ackFd;
    this.#log = new FloorLog(fd, mainThread);
    this.#log.durable = (buf, start, end, seqs) => {
      for (let i = 0, at = start; at < end; i++) {
        const n = PAYLOAD_OF(buf, at);
        this.#ready.push(new FloorItem(this, seqs[i], new Uint8Array(buf.buffer, buf.byteOffset + at + FRAME_HEADER_BYTES, n)));
        at += FRAME_HEADER_BYTES + n;
      }
      if (this.#waiters.length === 0 || this.#head === this.#ready.length) return;
      const n = Math.min(this.#waiters.length, this.#ready.length - this.#head);
      // One bound for the items handed out together, written before any of them is.
      this.#mark(this.#ready[this.#head + n - 1].seq);
      for (let i = 0; i < n; i++) this.#waiters.shift()(this.#take());
    };
  }

  /** The MARK record of the first-delivery bound past `seq`, written before the item is handed out. */
  #mark(seq) {
    if (this.closed) return;
    writeU64(this.#markPayload, 0, seq + 1);
    const end = encodeFrame(this.#markBuf, 0, ++this.#recordSeq, RECORD_MARK, this.#markPayload);
    writeSync(this.#ackFd, this.#markBuf, 0, end, this.#ackPos);
    this.#ackPos += end;
  }

  push(payload) {
    return this.#log.push(payload);
  }

  #take() {
    const item = this.#ready[this.#head];
    this.#ready[this.#head++] = undefined;
    if (this.#head === this.#ready.length) {
      this.#ready = [];
      this.#head = 0;
    }
    return item;
  }

  reserve() {
    if (this.#head < this.#ready.length) {
      this.#mark(this.#ready[this.#head].seq);
      return Promise.resolve(this.#take());
    }
    return new Promise((resolve) => {
      this.#waiters.push(resolve);
    });
  }

  /** The ACK record of `seq` (one range, as LogStore writes for one seq) at `at` of `buf`; returns the offset past it. */
  #encodeAck(buf, at, seq) {
    writeU64(this.#payload, 0, seq);
    writeU64(this.#payload, 8, seq + 1);
    return encodeFrame(buf, at, ++this.#recordSeq, RECORD_ACK, this.#payload);
  }

  /** As `ack`, for many consumers at once: the acks of one turn share one write and one promise. */
  ackInTurn(seq) {
    this.#turnSeqs.push(seq);
    if (this.#turnDone === undefined) {
      this.#turnDone = new Promise((resolve) => {
        this.#turnResolve = resolve;
      });
      void SETTLED.then(this.#writeTurn);
    }
    return this.#turnDone;
  }

  #writeTurn = () => {
    const seqs = this.#turnSeqs;
    const resolve = this.#turnResolve;
    this.#turnSeqs = [];
    this.#turnDone = undefined;
    if (this.closed) return resolve();
    const buf = Buffer.allocUnsafe(seqs.length * ACK_RECORD_BYTES);
    let at = 0;
    for (const seq of seqs) at = this.#encodeAck(buf, at, seq);
    writeSync(this.#ackFd, buf, 0, at, this.#ackPos);
    this.#ackPos += at;
    const before = this.#acks;
    this.#acks += seqs.length;
    if (Math.floor(this.#acks / ACK_SYNC_EVERY) !== Math.floor(before / ACK_SYNC_EVERY)) fdatasync(this.#ackFd, () => {});
    resolve();
  };

  ack(seq) {
    if (this.closed) return SETTLED;
    this.#encodeAck(this.#ackBuf, 0, seq);
    writeSync(this.#ackFd, this.#ackBuf, 0, ACK_RECORD_BYTES, this.#ackPos);
    this.#ackPos += ACK_RECORD_BYTES;
    if (++this.#acks % ACK_SYNC_EVERY === 0) fdatasync(this.#ackFd, () => {});
    return SETTLED;
  }
}

/** The payload length of the frame at `at` (FORMAT §3). */
function PAYLOAD_OF(buf, at) {
  return readU32(buf, at + FRAME_OFF_LENGTH);
}

/**
 * The README's consumers over a FloorQueue, for `budgetMs`, while `producers` callers await push
 * in a loop: `consumer` 'loop' (one consumer awaiting reserve() and ack()), 'process' (64 workers,
 * each awaiting reserve(), an async handler and an ack whose write it shares with the other acks
 * of its turn), or undefined (push only). `mainThread`: the log's syncs block the calling thread,
 * as LogStore's do under `blockingSync` (and under 'auto' on a quiet loop). Returns { pushed,
 * handled } per second.
 */
export async function floorReadmeRates(scratch, { producers, payload, budgetMs, consumer, mainThread = false }) {
  const base = join(scratch, `floor-q-${process.pid}-${Math.floor(performance.now() * 1000)}`);
  const fd = openSync(`${base}.log`, 'w+', 0o600);
  const ackFd = openSync(`${base}.ack`, 'w+', 0o600);
  try {
    zeroFill(fd, 0, Math.ceil((400_000 * budgetMs) / 1000) * (FRAME_HEADER_BYTES + payload.length));
    fdatasyncSync(fd);
    const q = new FloorQueue(fd, ackFd, mainThread);
    let handled = 0;
    let running = true;
    const handle = async () => {
      handled++;
    };
    if (consumer === 'loop') {
      void (async () => {
        while (running) {
          const item = await q.reserve();
          handled++;
          await item.ack();
        }
      })();
    } else if (consumer === 'process') {
      for (let w = 0; w < 64; w++) {
        void (async () => {
          while (running) {
            const item = await q.reserve();
            await handle(item.bytes);
            await q.ackInTurn(item.seq);
          }
        })();
      }
    }
    // Consumers still waiting for an item when the producers stop are left behind with the queue.
    const r = await pushOnly(q, { producers, payload, count: Infinity, budgetMs });
    running = false;
    q.closed = true;
    return { pushed: r.msgs / r.seconds, handled: handled / r.seconds };
  } finally {
    closeSync(fd);
    closeSync(ackFd);
    rmSync(`${base}.log`, { force: true });
    rmSync(`${base}.ack`, { force: true });
  }
}
