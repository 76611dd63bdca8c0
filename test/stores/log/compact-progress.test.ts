/** `compact({ onProgress })`: what a long compaction tells its caller while it rewrites segments. */
import { afterEach, describe, expect, it } from 'vitest';
import type { LogStore } from '../../../src/stores/log/log-store.js';
import { cleanupDirs, freshDir, items, openStore, readAllTexts } from './helpers.js';

afterEach(cleanupDirs);

async function storeWithSealedHoles(dir: string): Promise<LogStore> {
  const { store, nextSeq: s } = await openStore(dir, { segmentBytes: 4096, autoCompact: false });
  for (let b = 0; b < 40; b++)
    await store.append(
      items(
        s + b * 10,
        Array.from({ length: 10 }, (_, i) => `item-${b * 10 + i}-${'x'.repeat(100)}`),
      ),
      false,
    );
  // Every other item acked: every sealed segment holds acked records and live ones.
  await store.ack(
    Array.from({ length: 200 }, (_, i) => s + i * 2),
    true,
  );
  return store;
}

describe('compact progress', () => {
  it('reports the bytes of the rewritten segments read so far, rising to their total', async () => {
    const store = await storeWithSealedHoles(freshDir());
    const sealedBytes = store
      .inspect()
      .segments.filter((x) => x.sealed)
      .reduce((a, x) => a + x.bytes, 0);
    const seen: [number, number][] = [];
    const live = readAllTexts(store);
    const r = await store.compact({ onProgress: (done, total) => seen.push([done, total]) });
    expect(r.segmentsRewritten).toBeGreaterThan(0);
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect(seen[0]).toEqual([0, sealedBytes]);
    expect(seen[seen.length - 1]).toEqual([sealedBytes, sealedBytes]);
    for (let i = 1; i < seen.length; i++) expect(seen[i]![0]).toBeGreaterThanOrEqual(seen[i - 1]![0]);
    expect(readAllTexts(store)).toEqual(live);
    await store.close();
  });

  it('a compaction with nothing to rewrite reports nothing; a bad callback is a TypeError and compacts nothing', async () => {
    const dir = freshDir();
    const store = await storeWithSealedHoles(dir);
    const before = store.inspect();
    await expect(store.compact({ onProgress: 'yes' as never })).rejects.toThrow(TypeError);
    await expect(store.compact(7 as never)).rejects.toThrow(TypeError);
    expect(store.inspect().segments).toEqual(before.segments);
    await store.compact();
    const seen: number[] = [];
    const again = await store.compact({ onProgress: (done) => seen.push(done) });
    expect(again.segmentsRewritten).toBe(0);
    expect(seen).toEqual([]);
    await store.close();
  });
});
