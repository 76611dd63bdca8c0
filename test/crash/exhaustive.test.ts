/**
 * Exhaustive crash points. Each short fixed workload runs once on the simulated crash
 * disk, recording the I/O trace and, for every operation, the trace length when it was issued and
 * when it resolved. Then every crash point of the trace (`crashPoints()` with `zeroTail`: every
 * prefix of the trace, every torn length of the last write, and the F3 zero-tail variants) is
 * recovered and checked:
 * - the store opens (a tolerated crash state is never ERR_CORRUPT);
 * - recovered seqs are strictly increasing, each with exactly the bytes appended with it;
 * - every append that resolved (sync) before the crash point is present, unless an ack of it was
 *   issued before the crash point; every ack that resolved before it holds;
 * - nextSeq is above every recovered seq and every durably acked seq;
 * - the recovered store works: one more append, a clean close and a reopen keep everything.
 * The number of states explored is printed per workload and must equal what the trace implies.
 * Deterministic: no randomness at all.
 */
import { describe, expect, it } from 'vitest';
import { LogStore, type LogStoreOptions } from '../../src/stores/log/log-store.js';
import type { StoredItem } from '../../src/contract/store.js';
import { CrashFileSystem, type CrashPoint, formatCrashPoint, type TraceEntry } from '../../src/testing/index.js';
import { readAll } from '../../harness/crash-model.js';

const DIR = '/q';

interface Recorded {
  fs: CrashFileSystem;
  from: number;
  options: LogStoreOptions;
  appended: Map<number, Uint8Array>;
  /** seq -> trace length when its append resolved (durable from there on). */
  appendResolvedAt: Map<number, number>;
  /** seq -> trace length when its ack was issued (it may hold from there on). */
  ackIssuedAt: Map<number, number>;
  /** seq -> trace length when its ack resolved (durable from there on). */
  ackResolvedAt: Map<number, number>;
}

function bytesFor(seq: number, size: number): Uint8Array {
  const b = new Uint8Array(size);
  for (let i = 0; i < size; i++) b[i] = (seq * 31 + i * 7) & 0xff;
  return b;
}

/** Runs `body` against a fresh store on a fresh disk, recording what resolved when. */
async function record(
  options: LogStoreOptions,
  body: (ops: {
    append(seqs: number[], size: number): Promise<void>;
    ack(seqs: number[]): Promise<void>;
    store: LogStore;
  }) => Promise<void>,
): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 1 });
  const store = await LogStore.open(DIR, { ...options, fs });
  await store.open();
  const rec: Recorded = {
    fs,
    from: fs.traceLength,
    options,
    appended: new Map(),
    appendResolvedAt: new Map(),
    ackIssuedAt: new Map(),
    ackResolvedAt: new Map(),
  };
  await body({
    store,
    append: async (seqs, size) => {
      const items: StoredItem[] = seqs.map((seq) => ({ seq, bytes: bytesFor(seq, size) }));
      for (const it of items) rec.appended.set(it.seq, it.bytes);
      await store.append(items, true);
      for (const it of items) rec.appendResolvedAt.set(it.seq, fs.traceLength);
    },
    ack: async (seqs) => {
      for (const s of seqs) rec.ackIssuedAt.set(s, fs.traceLength);
      await store.ack(seqs, true);
      for (const s of seqs) rec.ackResolvedAt.set(s, fs.traceLength);
    },
  });
  await store.settled();
  // The clean close belongs to the workload too: its checkpoint and trims are crash points.
  await store.close();
  return rec;
}

/** How many crash points `crashPoints({ from, zeroTail: true })` must yield, computed from the trace alone. */
function expectedStates(trace: readonly TraceEntry[], from: number, to: number): number {
  // File sizes before each write, replayed by path (a rename moves the file; an fd keeps writing
  // to the file it opened, named by the path it was opened with).
  const files = new Map<string, { size: number }>();
  const lastAt = new Map<string, { size: number }>();
  const sizeBefore = new Map<number, number>();
  for (const e of trace) {
    const file = (): { size: number } => {
      let f = files.get(e.path) ?? lastAt.get(e.path);
      if (f === undefined) {
        f = { size: 0 };
        files.set(e.path, f);
        lastAt.set(e.path, f);
      }
      return f;
    };
    if (e.kind === 'create') {
      const f = { size: 0 };
      files.set(e.path, f);
      lastAt.set(e.path, f);
    } else if (e.kind === 'write') {
      const f = file();
      sizeBefore.set(e.index, f.size);
      f.size = Math.max(f.size, e.position! + e.length!);
    } else if (e.kind === 'truncate') {
      file().size = e.length!;
    } else if (e.kind === 'rename') {
      const f = files.get(e.path);
      files.delete(e.path);
      if (f !== undefined) files.set(e.to!, f);
    } else if (e.kind === 'unlink') {
      files.delete(e.path);
    }
  }
  let count = 0;
  for (let at = from; at <= to; at++) {
    count++;
    const last = at - 1 >= from ? trace.find((e) => e.index === at - 1) : undefined;
    if (last === undefined || last.kind !== 'write') continue;
    if (last.durableAt !== null && last.durableAt < at) continue;
    const n = last.length!;
    count += Math.max(0, n - 1);
    if (last.position! + n > sizeBefore.get(last.index)!) count += n;
  }
  return count;
}

async function checkPoint(rec: Recorded, point: CrashPoint): Promise<void> {
  const fs = rec.fs.crashAt(point);
  const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
  let store: LogStore;
  try {
    store = await LogStore.open(DIR, { ...rec.options, fs });
  } catch (e) {
    throw new Error(`${where}: open failed: ${(e as { code?: string }).code}: ${(e as Error).message}`);
  }
  const { nextSeq, count } = await store.open();
  const got = readAll(store);
  expect(count, `${where}: count`).toBe(got.length);
  let prev = 0;
  const present = new Set<number>();
  for (const it of got) {
    expect(it.seq, `${where}: order`).toBeGreaterThan(prev);
    prev = it.seq;
    const want = rec.appended.get(it.seq);
    expect(want, `${where}: seq ${it.seq} was never appended`).toBeDefined();
    expect(Buffer.from(it.bytes).equals(Buffer.from(want!)), `${where}: bytes of seq ${it.seq}`).toBe(true);
    const ackAt = rec.ackResolvedAt.get(it.seq);
    expect(ackAt !== undefined && ackAt <= point.at, `${where}: seq ${it.seq} was acked durably but came back`).toBe(false);
    present.add(it.seq);
  }
  for (const [seq, at] of rec.appendResolvedAt) {
    if (at > point.at || present.has(seq)) continue;
    const ackIssued = rec.ackIssuedAt.get(seq);
    expect(ackIssued !== undefined && ackIssued < point.at, `${where}: seq ${seq} was appended durably and not acked, but is missing`).toBe(
      true,
    );
  }
  for (const [seq, at] of rec.ackResolvedAt)
    if (at <= point.at) expect(nextSeq, `${where}: nextSeq reuses acked seq ${seq}`).toBeGreaterThan(seq);
  if (got.length > 0) expect(nextSeq).toBeGreaterThan(got[got.length - 1]!.seq);
  // The recovered store works.
  const extra = { seq: nextSeq, bytes: bytesFor(nextSeq, 9) };
  await store.append([extra], true);
  await store.close();
  const again = await LogStore.open(DIR, { ...rec.options, fs });
  await again.open();
  const after = readAll(again).map((i) => i.seq);
  expect(after, `${where}: reopen after recovery`).toEqual([...got.map((i) => i.seq), extra.seq]);
  await again.close();
}

async function explore(name: string, rec: Recorded): Promise<number> {
  const to = rec.fs.traceLength;
  let states = 0;
  for (const point of rec.fs.crashPoints({ from: rec.from, zeroTail: true })) {
    await checkPoint(rec, point);
    states++;
  }
  const expected = expectedStates(rec.fs.trace(), rec.from, to);
  console.log(
    `[exhaustive] ${name}: ${states} crash states explored (${to - rec.from + 1} crash points of a ${to - rec.from}-entry trace, every torn length of the last write, F3 zero tails)`,
  );
  expect(states).toBeGreaterThan(0);
  expect(states).toBe(expected);
  return states;
}

describe('exhaustive crash points', () => {
  it('pushes across a segment roll', async () => {
    const rec = await record({ segmentBytes: 256, preallocate: false, autoCompact: false }, async ({ append }) => {
      for (let seq = 1; seq <= 7; seq++) await append([seq], 40);
      await append([8, 9], 12);
    });
    expect(rec.fs.listFiles(DIR).filter((f) => f.endsWith('.log')).length).toBeGreaterThan(1);
    await explore('pushes across a segment roll', rec);
  });

  it('pushes with preallocation (zero tails)', async () => {
    const rec = await record({ segmentBytes: 320, preallocate: true, autoCompact: false }, async ({ append }) => {
      for (let seq = 1; seq <= 6; seq++) await append([seq], 30);
    });
    await explore('pushes with preallocation', rec);
  });

  it('pushes and acks with blocking syncs', async () => {
    const rec = await record({ segmentBytes: 256, preallocate: true, autoCompact: false, blockingSync: true }, async ({ append, ack }) => {
      for (let seq = 1; seq <= 5; seq++) await append([seq], 40);
      await ack([2, 1]);
      await append([6, 7], 12);
      await ack([4]);
    });
    expect(rec.fs.stats().fdatasyncCount).toBeGreaterThan(0);
    await explore('pushes and acks with blocking syncs', rec);
  });

  it('an ack checkpoint', async () => {
    const rec = await record(
      { segmentBytes: 4096, cursorCheckpointBytes: 48, preallocate: false, autoCompact: false },
      async ({ append, ack, store }) => {
        await append([1, 2, 3, 4, 5, 6], 10);
        await ack([3]);
        await ack([1]);
        await ack([5, 6]);
        await store.settled(); // the checkpoint runs in the background
        await ack([2]);
      },
    );
    expect(rec.fs.trace().some((e) => e.kind === 'rename')).toBe(true);
    await explore('an ack checkpoint', rec);
  });

  it('a compaction with a pinned segment rewritten', async () => {
    const rec = await record(
      { segmentBytes: 256, cursorCheckpointBytes: 4096, preallocate: false, autoCompact: false },
      async ({ append, ack, store }) => {
        for (let seq = 1; seq <= 10; seq++) await append([seq], 30);
        // Ack everything but seq 2: the first segment is pinned by one live record, the second is fully acked.
        await ack([1, 3, 4, 5, 6, 7, 8, 9]);
        const result = await store.compact();
        expect(result.segmentsRewritten + result.segmentsDeleted).toBeGreaterThan(0);
      },
    );
    expect(rec.fs.trace().some((e) => e.kind === 'unlink')).toBe(true);
    await explore('a compaction with a pinned rewrite', rec);
  });
});
