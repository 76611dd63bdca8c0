/**
 * Engine bugs found by the crash-recovery tests. Each names the
 * property or fuzzer that found it.
 */
import { describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { CrashFileSystem } from '../../../src/testing/index.js';

const all = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 };

describe('regressions', () => {
  // Found by test/crash/model.test.ts: after a read crossed a seal into the next (empty) segment,
  // the reader's last seq was reset to 0, so a later read starting in an earlier segment did not
  // re-seek and returned nothing (the queue then failed with "Store read returned nothing").
  test('aSecondReadFromTheStartAfterCrossingASealReturnsEverything', async () => {
    const fs = new CrashFileSystem({ seed: 1 });
    const options = { fs, segmentBytes: 256, tailCacheBytes: 0, preallocate: false };
    let store = await LogStore.open('/q', options);
    await store.open();
    for (let seq = 1; seq <= 6; seq++) await store.append([{ seq, bytes: new Uint8Array(40).fill(seq) }], true);
    await store.close();
    store = await LogStore.open('/q', options);
    expect(store.inspect().segments.length).toBeGreaterThan(1);
    const base = store.inspect().segments[1]!.baseSeq;
    // Stop right at the start of the second segment: the reader crossed the seal, read nothing there.
    expect(store.read({ after: 0, before: base, limit: 1e9 }).map((i) => i.seq)).toHaveLength(base - 1);
    const first = store.read(all).map((i) => i.seq);
    expect(first).toEqual([1, 2, 3, 4, 5, 6]);
    expect(store.read(all).map((i) => i.seq)).toEqual(first);
    expect(store.read({ after: 2, before: Number.MAX_SAFE_INTEGER, limit: 2 }).map((i) => i.seq)).toEqual([3, 4]);
    expect(store.read(all).map((i) => i.seq)).toEqual(first);
    await store.close();
  });
});

describe('regressions: a crash while a segment is being created', () => {
  // Found by test/crash/exhaustive.test.ts (and by the model test, after ENOSPC on the header
  // write): a crash after a roll created the next segment file but before its header was durable
  // left a 0-byte, torn or zero-filled segment, and recovery reported ERR_CORRUPT for that
  // tolerated (F1/F3/F4) state.
  async function rolled(): Promise<{ fs: CrashFileSystem; create: number; header: number }> {
    const fs = new CrashFileSystem({ seed: 1 });
    const store = await LogStore.open('/q', { fs, segmentBytes: 256, preallocate: false });
    await store.open();
    for (let seq = 1; seq <= 6; seq++) await store.append([{ seq, bytes: new Uint8Array(40).fill(seq) }], true);
    const trace = fs.trace();
    const create = trace.find((e) => e.kind === 'create' && e.path.endsWith('.log') && !e.path.endsWith('00001.log'))!;
    const header = trace.find((e) => e.kind === 'write' && e.path === create.path)!;
    expect(header.length).toBe(32);
    return { fs, create: create.index, header: header.index };
  }

  test.each([
    ['empty (created, header not written)', (r: { create: number; header: number }) => ({ at: r.create + 1, keep: r.create + 1 })],
    ['empty (header write lost)', (r: { create: number; header: number }) => ({ at: r.header + 1, keep: r.header })],
    ['torn header', (r: { create: number; header: number }) => ({ at: r.header + 1, keep: r.header, tornBytes: 11 })],
    ['zero-filled header', (r: { create: number; header: number }) => ({ at: r.header + 1, keep: r.header, zeroTail: true })],
    ['torn then zeros', (r: { create: number; header: number }) => ({ at: r.header + 1, keep: r.header, tornBytes: 7, zeroTail: true })],
  ])('aSegmentWhoseCreationWasInterruptedOpens: %s', async (_name, point) => {
    const r = await rolled();
    const fs = r.fs.crashAt(point(r));
    const store = await LogStore.open('/q', { fs, segmentBytes: 256, preallocate: false });
    const { count } = await store.open();
    expect(store.read(all).map((i) => i.seq)).toHaveLength(count);
    await store.append([{ seq: store.inspect().nextSeq, bytes: new Uint8Array(3) }], true);
    await store.close();
  });

  test('anIncompleteHeaderAfterAnUnsealedSegmentIsStillCorruption', async () => {
    const fs = new CrashFileSystem({ seed: 1 });
    const store = await LogStore.open('/q', { fs, segmentBytes: 4096 });
    await store.open();
    await store.append([{ seq: 1, bytes: new Uint8Array(4) }], true);
    await store.close();
    // No roll was creating seg 2 (seg 1 is not sealed): an empty seg 2 is damage, not a torn creation.
    fs.close(fs.open('/q/seg-00000000000000000002.log', 'create'));
    await expect(LogStore.open('/q', { fs })).rejects.toMatchObject({ code: 'ERR_CORRUPT' });
  });
});
