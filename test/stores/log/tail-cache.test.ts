// The tail cache (src/stores/log/engine/reader.ts), off by default, keeps plain batches as copies of their
// frames, in runs of at most 64 KiB, and batches with metadata as their items. Whatever it holds,
// a read from it must return what a read of the same range from disk returns.
import { afterAll, describe, expect, test } from 'vitest';
import type { StoredItem } from '../../../src/contract/store.js';
import { cleanupDirs, freshDir, openStore, WrappedFs } from './helpers.js';

afterAll(cleanupDirs);

/** Item `seq`'s payload, `length` bytes long, every byte derived from the seq. */
function payloadOf(seq: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let k = 0; k < length; k++) out[k] = (seq * 131 + k * 7) & 0xff;
  return out;
}

/** What a read returns, in a form `toEqual` compares fully (the bytes as arrays). */
function shape(items: readonly StoredItem[]): unknown[] {
  return items.map((i) => ({ seq: i.seq, bytes: [...i.bytes], priority: i.priority ?? 0, notBefore: i.notBefore ?? 0 }));
}

/**
 * Batches: one plain batch of 1000 items of 200 B (220 000 bytes of frames, so four runs), single
 * plain items, a batch with priorities (kept as items), a plain batch of one item larger than a
 * run, and small plain batches; then some acks.
 */
async function fill(dir: string, fs: WrappedFs) {
  const { store, nextSeq } = await openStore(dir, { fs, tailCacheBytes: 8 * 1024 * 1024 });
  let seq = nextSeq;
  const batch = (lengths: number[], priority = 0): StoredItem[] =>
    lengths.map((length) => {
      const s = seq++;
      return priority === 0 ? { seq: s, bytes: payloadOf(s, length) } : { seq: s, bytes: payloadOf(s, length), priority };
    });
  await store.append(batch(Array.from({ length: 1000 }, () => 200)), false);
  for (let i = 0; i < 5; i++) await store.append(batch([17 + i]), false);
  await store.append(batch([40, 41, 42], 3), false);
  await store.append(batch([100_000]), false);
  await store.append(batch([0, 1, 64, 300]), false);
  await store.append(batch(Array.from({ length: 700 }, (_, i) => (i * 37) % 500)), false);
  const acked = [1, 2, 3, 500, 501, 640, 1001, 1003, 1006, 1008, 1010, 1500, seq - 1];
  await store.ack(acked, true);
  return { store, last: seq - 1 };
}

describe('the tail cache', () => {
  test('readsFromTheCacheEqualReadsFromDisk', async () => {
    const dir = freshDir();
    const fs = new WrappedFs();
    const { store, last } = await fill(dir, fs);
    // Every range: starts in the middle of runs and at their edges, ends (before) likewise, limits small and large.
    const ranges: { after: number; before: number; limit: number }[] = [];
    for (const after of [0, 1, 2, 296, 297, 298, 595, 999, 1000, 1004, 1006, 1007, 1009, 1010, 1011, 1400, last - 2, last]) {
      for (const before of [after + 1, after + 2, 299, 1007, 1010, 1012, last, last + 1, Number.MAX_SAFE_INTEGER]) {
        for (const limit of [1, 256, 5000]) if (before > after) ranges.push({ after, before, limit });
      }
    }
    const readBefore = fs.bytesRead;
    const cached = ranges.map((r) => shape(store.read(r) as StoredItem[]));
    // Every item is in the cache: not one byte was read from disk for these reads.
    expect(fs.bytesRead - readBefore).toBe(0);
    await store.close();
    // The same store opened again holds nothing in its cache: every read goes to disk.
    const { store: disk } = await openStore(dir, { tailCacheBytes: 0 });
    const fromDisk = ranges.map((r) => shape(disk.read(r) as StoredItem[]));
    await disk.close();
    expect(cached.length).toBe(ranges.length);
    for (let i = 0; i < ranges.length; i++) expect(cached[i], JSON.stringify(ranges[i])).toEqual(fromDisk[i]);
    // The reads returned items: the first unacked one, and the batch with priorities as stored.
    const first = ranges.findIndex((r) => r.after === 0 && r.before === Number.MAX_SAFE_INTEGER && r.limit === 1);
    expect(cached[first]).toEqual([{ seq: 4, bytes: [...payloadOf(4, 200)], priority: 0, notBefore: 0 }]);
    const scheduled = ranges.findIndex((r) => r.after === 1004 && r.before === 1010 && r.limit === 256);
    expect(cached[scheduled]).toEqual([
      { seq: 1005, bytes: [...payloadOf(1005, 21)], priority: 0, notBefore: 0 },
      { seq: 1007, bytes: [...payloadOf(1007, 41)], priority: 3, notBefore: 0 },
      { seq: 1009, bytes: [...payloadOf(1009, 100_000)], priority: 0, notBefore: 0 },
    ]);
  });

  test('anItemReadFromTheCacheKeepsItsBytesWhileTheCacheMovesOn', async () => {
    const dir = freshDir();
    // A cache of 100 KiB: later appends evict the first batch while its items are still held.
    const { store } = await openStore(dir, { tailCacheBytes: 100 * 1024 });
    await store.append(
      Array.from({ length: 300 }, (_, i) => ({ seq: i + 1, bytes: payloadOf(i + 1, 200) })),
      false,
    );
    const held = store.read({ after: 0, before: 301, limit: 300 }) as StoredItem[];
    for (let b = 0; b < 10; b++) {
      const first = 301 + b * 300;
      await store.append(
        Array.from({ length: 300 }, (_, i) => ({ seq: first + i, bytes: payloadOf(first + i, 200) })),
        false,
      );
    }
    expect(held.length).toBe(300);
    for (const item of held) expect([...item.bytes]).toEqual([...payloadOf(item.seq, 200)]);
    // The first batch is out of the cache now: a read of it goes to disk and returns the same.
    expect(shape(store.read({ after: 0, before: 301, limit: 300 }) as StoredItem[])).toEqual(shape(held));
    await store.close();
  });

  test('isOffByDefault', async () => {
    // Without the option, what was just appended is read from the segment, and reads the same.
    const dir = freshDir();
    const fs = new WrappedFs();
    const { store } = await openStore(dir, { fs });
    const items = Array.from({ length: 50 }, (_, i) => ({ seq: i + 1, bytes: payloadOf(i + 1, 100) }));
    await store.append(items, false);
    const readBefore = fs.bytesRead;
    const got = store.read({ after: 0, before: 51, limit: 50 }) as StoredItem[];
    expect(fs.bytesRead - readBefore).toBeGreaterThanOrEqual(50 * 100);
    expect(shape(got)).toEqual(shape(items));
    await store.close();
  });
});
