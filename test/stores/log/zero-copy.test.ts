// Zero-copy reads (LogStore option zeroCopyReads, on by default): plain items read from disk are
// views into the read-ahead chunk, never copied; a chunk a view was handed out from is never
// written again, so every view keeps its bytes for as long as it lives.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ByteArena } from '../../../src/lib/bytes.js';
import { Builder, type Reserved } from '../../../src/index.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { cleanupDirs, freshDir } from './helpers.js';

afterEach(() => {
  vi.restoreAllMocks();
  cleanupDirs();
});

/** Item `i`'s payload: its number, then filler derived from it, so any overwrite shows. */
function payloadOf(i: number, bytes = 100): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let k = 0; k < bytes; k++) out[k] = (i * 31 + k * 7) & 0xff;
  out[0] = i & 0xff;
  out[1] = (i >> 8) & 0xff;
  return out;
}

/** A store holding `count` items on disk, opened again so reads come from the segments (no tail cache). */
async function backlog(
  dir: string,
  count: number,
  options: { zeroCopyReads?: boolean; priorityEvery?: number; readAheadBytes?: number } = {},
) {
  const [tx, rx] = await new Builder(await LogStore.open(dir)).open();
  for (let i = 0; i < count; i += 50) {
    const batch = Array.from({ length: Math.min(50, count - i) }, (_, k) => payloadOf(i + k));
    if (options.priorityEvery === undefined) await tx.pushMany(batch);
    else for (let k = 0; k < batch.length; k++) await tx.push(batch[k]!, (i + k) % options.priorityEvery === 0 ? { priority: 1 } : {});
  }
  await rx.close();
  const store = await LogStore.open(dir, {
    tailCacheBytes: 0,
    readAheadBytes: options.readAheadBytes ?? 4096,
    ...(options.zeroCopyReads === undefined ? {} : { zeroCopyReads: options.zeroCopyReads }),
  });
  return new Builder(store).open();
}

describe('zero-copy reads', () => {
  it('plainItemsReadFromDiskAreNotCopied', async () => {
    const dir = freshDir();
    const copy = vi.spyOn(ByteArena.prototype, 'copy');
    const [, rx] = await backlog(dir, 300);
    copy.mockClear();
    for (let i = 0; i < 300; i++) {
      const item = (await rx.reserve())!;
      expect(item.bytes).toEqual(payloadOf(i));
      await item.ack();
    }
    expect(copy).not.toHaveBeenCalled();
    await rx.close();
  });

  it('withZeroCopyReadsOffEveryPayloadIsCopiedOnce', async () => {
    const dir = freshDir();
    const copy = vi.spyOn(ByteArena.prototype, 'copy');
    const [, rx] = await backlog(dir, 300, { zeroCopyReads: false });
    copy.mockClear();
    for (let i = 0; i < 300; i++) {
      const item = (await rx.reserve())!;
      expect(item.bytes).toEqual(payloadOf(i));
      await item.ack();
    }
    expect(copy).toHaveBeenCalledTimes(300);
    await rx.close();
  });

  it('itemsWithAPriorityAreCopiedSinceTheQueueMayHoldThemLong', async () => {
    const dir = freshDir();
    const copy = vi.spyOn(ByteArena.prototype, 'copy');
    const [, rx] = await backlog(dir, 100, { priorityEvery: 10 });
    // The open read the scheduled items (every tenth) into the schedule, as copies.
    expect(copy.mock.calls.length).toBeGreaterThanOrEqual(10);
    copy.mockClear();
    const seen: number[] = [];
    for (let i = 0; i < 100; i++) {
      const item = (await rx.reserve())!;
      seen.push(item.bytes[0]! | (item.bytes[1]! << 8));
      expect(item.bytes).toEqual(payloadOf(seen[seen.length - 1]!));
      await item.ack();
    }
    // Priority 1 first, in seq order, then the plain ones: the plain ones were not copied.
    expect(seen.slice(0, 10)).toEqual([0, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
    expect(copy).not.toHaveBeenCalled();
    await rx.close();
  });

  it('aHeldItemKeepsItsBytesWhileTheReaderGoesOnThroughManyChunks', async () => {
    const dir = freshDir();
    const [, rx] = await backlog(dir, 2000);
    const held: Reserved[] = [];
    // Hold every 97th item; ack the others. The 4 KiB read-ahead refills about fifty times.
    for (let i = 0; i < 2000; i++) {
      const item = (await rx.reserve())!;
      if (i % 97 === 0) held.push(item);
      else await item.ack();
    }
    for (const item of held) expect(item.bytes).toEqual(payloadOf(item.bytes[0]! | (item.bytes[1]! << 8)));
    expect(held.map((h) => h.seq)).toEqual(held.map((_, k) => k * 97 + 1));
    // A nacked item comes back with the same, intact bytes.
    const first = held[0]!;
    await first.nack();
    const again = (await rx.reserve())!;
    expect(again.seq).toBe(first.seq);
    expect(again.bytes).toEqual(payloadOf(0));
    await again.ack();
    for (const item of held.slice(1)) await item.ack();
    await rx.close();
  });

  it('aDelayedRetryKeepsACopyNotTheWholeChunk', async () => {
    const dir = freshDir();
    const [, rx] = await backlog(dir, 50, { readAheadBytes: 256 * 1024 });
    const item = (await rx.reserve())!;
    // Read from disk: a view into the 256 KiB read-ahead chunk.
    expect(item.bytes.buffer.byteLength).toBeGreaterThanOrEqual(256 * 1024);
    await item.nack({ delayMs: 20 });
    // Held for the delay as a copy of its own, so the chunk may go.
    expect(item.bytes.buffer.byteLength).toBe(item.bytes.byteLength);
    expect(item.bytes).toEqual(payloadOf(0));
    const others: Reserved[] = [];
    for (let i = 1; i < 50; i++) others.push((await rx.reserve())!);
    const again = (await rx.reserve())!;
    expect(again.seq).toBe(item.seq);
    expect(again.bytes).toEqual(payloadOf(0));
    // A plain nack hands it out again at once: nothing is copied there.
    const plain = others[0]!;
    const view = plain.bytes;
    await plain.nack();
    expect(plain.bytes).toBe(view);
    await rx.close();
  });

  it('aDeadLetterKeepsACopyNotTheWholeChunk', async () => {
    const dir = freshDir();
    const [, rx] = await backlog(dir, 20, { readAheadBytes: 256 * 1024 });
    const item = (await rx.reserve())!;
    expect(item.bytes.buffer.byteLength).toBeGreaterThanOrEqual(256 * 1024);
    await item.deadLetter('kept apart');
    const letters = await rx.deadLetters.list();
    expect(letters.map((l) => l.seq)).toEqual([item.seq]);
    expect(letters[0]!.bytes).toEqual(payloadOf(0));
    expect(letters[0]!.bytes.buffer.byteLength).toBe(letters[0]!.bytes.byteLength);
    await rx.close();
  });

  it('aBadZeroCopyReadsOptionIsATypeError', async () => {
    const dir = freshDir();
    await expect(LogStore.open(dir, { zeroCopyReads: 'yes' as unknown as boolean })).rejects.toBeInstanceOf(TypeError);
  });
});
