/**
 * Crash points of the delayed compaction round (`compactDelayMs`). An old item pins every segment
 * after it; the rest is acked lazily (written, some synced, some not), and then the queue is idle:
 * the test moves the store's clock by the delay and the round rewrites the pinned segments
 * (checkpoint, tmp segment, rename, unlinks, directory fsyncs), then the store closes cleanly.
 * At every crash point of that trace (`crashPoints()` with `zeroTail`: every prefix, every torn
 * length of the last write, the F3 zero tails; then with any prefix of the unsynced writes kept,
 * down to only what was synced since the round started):
 * - the store opens, seqs strictly increase, each with the bytes appended with it;
 * - every unacked item is there (nothing lost);
 * - no item whose ack a completed sync covered comes back, and once the round has finished, no
 *   acked item at all (its checkpoint made every ack durable): nothing is resurrected beyond what
 *   lazy acks allow;
 * - the recovered store works: one more append, a clean close and a reopen keep everything.
 * Deterministic: a fixed disk seed, and time moves only when the test moves it.
 */
import { describe, expect, it } from 'vitest';
import { LogStore, type LogStoreOptions } from '../../src/stores/log/log-store.js';
import { CrashFileSystem, type CrashPoint, formatCrashPoint, ManualClock } from '../../src/testing/index.js';
import { readAll } from '../../harness/crash-model.js';

const DIR = '/q';
const DELAY_MS = 1000;
const OPTIONS: LogStoreOptions = { segmentBytes: 256, preallocate: false, compactDelayMs: DELAY_MS, cursorCheckpointBytes: 1 << 20 };

function bytesFor(seq: number): Uint8Array {
  const b = new Uint8Array(24);
  for (let i = 0; i < b.length; i++) b[i] = (seq * 31 + i * 7) & 0xff;
  return b;
}

interface Recorded {
  fs: CrashFileSystem;
  /** Trace length when the clock moved: the round's first crash point. */
  from: number;
  /** Trace length when the round had finished. */
  doneAt: number;
  appended: Map<number, Uint8Array>;
  unacked: Set<number>;
  /** seq -> trace length when a sync covering its ack completed. */
  ackSyncedAt: Map<number, number>;
  segmentsBefore: number;
  segmentsAfter: number;
}

async function record(): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 1 });
  const clock = new ManualClock();
  const store = await LogStore.open(DIR, { ...OPTIONS, fs, clock });
  await store.open();
  const appended = new Map<number, Uint8Array>();
  const append = async (seqs: number[]): Promise<void> => {
    for (const s of seqs) appended.set(s, bytesFor(s));
    await store.append(
      seqs.map((seq) => ({ seq, bytes: bytesFor(seq) })),
      true,
    );
  };
  // Seq 1 is the old item; seq 20 is one more that stays unacked in the middle of the run.
  await append([1]);
  for (let s = 2; s <= 37; s += 3) await append([s, s + 1, s + 2]);
  const unacked = new Set([1, 20]);
  const toAck = [...appended.keys()].filter((s) => !unacked.has(s));
  const ackSyncedAt = new Map<number, number>();
  // Lazy acks: written in several records, the first half synced, the second half not.
  const half = toAck.length >> 1;
  for (let i = 0; i < half; i += 4) await store.ack(toAck.slice(i, Math.min(i + 4, half)), false);
  await store.sync();
  for (const s of toAck.slice(0, half)) ackSyncedAt.set(s, fs.traceLength);
  for (let i = half; i < toAck.length; i += 4) await store.ack(toAck.slice(i, Math.min(i + 4, toAck.length)), false);
  await store.settled();
  const segmentsBefore = store.inspect().segments.length;
  const from = fs.traceLength;
  clock.advance(DELAY_MS);
  await store.settled();
  const doneAt = fs.traceLength;
  const segmentsAfter = store.inspect().segments.length;
  await store.close();
  return { fs, from, doneAt, appended, unacked, ackSyncedAt, segmentsBefore, segmentsAfter };
}

async function check(rec: Recorded, point: CrashPoint): Promise<void> {
  const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
  const fs = rec.fs.crashAt(point);
  let store: LogStore;
  try {
    store = await LogStore.open(DIR, { ...OPTIONS, fs, clock: new ManualClock() });
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
    expect(Buffer.from(it.bytes).equals(Buffer.from(rec.appended.get(it.seq)!)), `${where}: bytes of seq ${it.seq}`).toBe(true);
    const syncedAt = rec.ackSyncedAt.get(it.seq);
    expect(syncedAt !== undefined && syncedAt <= point.at, `${where}: seq ${it.seq} came back although its ack was synced`).toBe(false);
    if (point.at >= rec.doneAt) expect(rec.unacked.has(it.seq), `${where}: acked seq ${it.seq} came back after the round`).toBe(true);
    present.add(it.seq);
  }
  for (const s of rec.unacked) expect(present.has(s), `${where}: unacked seq ${s} is missing`).toBe(true);
  expect(nextSeq, `${where}: nextSeq`).toBeGreaterThan(Math.max(...rec.appended.keys()));
  // The recovered store works.
  const extra = { seq: nextSeq, bytes: bytesFor(nextSeq) };
  await store.append([extra], true);
  await store.close();
  const again = await LogStore.open(DIR, { ...OPTIONS, fs, clock: new ManualClock() });
  await again.open();
  expect(
    readAll(again).map((i) => i.seq),
    `${where}: reopen after recovery`,
  ).toEqual([...got.map((i) => i.seq), extra.seq]);
  await again.close();
}

describe('crash points of the delayed compaction round', () => {
  it('everyCrashPointOfTheDelayedRoundLosesNothingAndResurrectsNoDurableAck', async () => {
    const rec = await record();
    // The workload did what it is for: the round rewrote the pinned segments, with the whole protocol.
    expect(rec.segmentsBefore).toBeGreaterThan(8);
    expect(rec.segmentsAfter).toBe(2);
    const round = rec.fs.trace().filter((e) => e.index >= rec.from && e.index < rec.doneAt);
    expect(round.some((e) => e.kind === 'rename' && /cursor/.test(e.path))).toBe(true);
    expect(round.some((e) => e.kind === 'rename' && /seg-\d+\.log\.tmp$/.test(e.path))).toBe(true);
    expect(round.filter((e) => e.kind === 'unlink' && /seg-/.test(e.path)).length).toBe(rec.segmentsBefore - 2);
    let states = 0;
    let afterRound = 0;
    for (const point of rec.fs.crashPoints({ from: rec.from, zeroTail: true })) {
      await check(rec, point);
      states++;
      if (point.at >= rec.doneAt) afterRound++;
    }
    // The disk may also have written back any prefix of what was not synced, the cut torn (F1 + F2
    // over the whole round), down to only what was synced since the round started.
    for (let at = rec.from; at <= rec.fs.traceLength; at++) {
      await check(rec, { at, keep: rec.from });
      states++;
    }
    for (const point of rec.fs.crashPoints({ from: rec.from, writeback: 'any', tornLengths: (n) => [1, n >> 1, n - 1] })) {
      await check(rec, point);
      states++;
    }
    console.log(
      `[idle-compaction crash] ${states} crash states explored (${rec.fs.traceLength - rec.from + 1} crash points, ${afterRound} after the round with the last write cut)`,
    );
    expect(afterRound).toBeGreaterThan(0);
    expect(states).toBeGreaterThan(rec.fs.traceLength - rec.from);
  }, 600_000);
});
