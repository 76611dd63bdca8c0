// LogStore's groups on disk: segment versions (a store that never holds a group writes what it
// wrote before; a grouped item lives only in a version-4 segment), groups across compaction and
// crashes, a group tag where a reader of an older version expects none, and damaged group metadata
// as corruption.
import * as nodeFs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { Builder } from '../../../src/core/builder.js';
import { crc32c32 } from '../../../src/stores/log/engine/crc.js';
import {
  FRAME_HEADER_BYTES,
  FRAME_OFF_META_BYTES,
  META_TAG_GROUP,
  SEG_OFF_HEADER_CRC,
  SEG_OFF_VERSION,
  SEGMENT_HEADER_BYTES,
  readU16,
} from '../../../src/stores/log/engine/format.js';
import type { StoredItem } from '../../../src/contract/store.js';
import { CrashFileSystem } from '../../../src/testing/index.js';
import { cleanupDirs, dec, enc, expectOpenError, fixCrc, freshDir, openStore, segFiles } from './helpers.js';

afterAll(cleanupDirs);

const segVersions = (dir: string) => segFiles(dir).map((n) => readU16(nodeFs.readFileSync(join(dir, n)), SEG_OFF_VERSION));
const grouped = (seq: number, text: string, group: string): StoredItem => ({ seq, bytes: enc(text), group });
const readAll = (store: LogStore) =>
  store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 }).map((i) => [i.seq, dec(i.bytes), i.group ?? '']);

describe('versions', () => {
  test('aQueueThatNeverPushesAGroupWritesNoVersion4Segment', async () => {
    const dir = freshDir();
    const [tx, rx] = await new Builder(await LogStore.open(dir, { segmentBytes: 256 })).open();
    for (let i = 0; i < 20; i++) await tx.push(`plain ${i}`, i % 5 === 0 ? { priority: 1 } : i % 7 === 0 ? { key: `k${i}` } : undefined);
    await (await rx.reserve())!.ack();
    await tx.close();
    expect(Math.max(...segVersions(dir))).toBe(3);
    expect(segVersions(dir)).not.toContain(4);
  });

  test('theFirstGroupedItemRollsTheActiveSegmentToVersion4AndAPlainSegmentFollowsOneWithoutGroups', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir, { segmentBytes: 4096 });
    await store.append([{ seq: s, bytes: enc('plain') }], true);
    expect(segVersions(dir)).toEqual([1]);
    await store.append([grouped(s + 1, 'a1', 'tenant-a')], true);
    // A header is never rewritten in place: the store rolled to a version-4 segment.
    expect(segVersions(dir)).toEqual([1, 4]);
    await store.close();
    const again = await LogStore.open(dir, { segmentBytes: 4096 });
    await again.open();
    expect(readAll(again)).toEqual([
      [s, 'plain', ''],
      [s + 1, 'a1', 'tenant-a'],
    ]);
    await again.close();
  });

  test('anEmptyActiveSegmentIsReplacedByAnEmptyVersion4OneBeforeTheFirstGroupedItem', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    expect(segVersions(dir)).toEqual([1]);
    await store.append([grouped(s, 'a1', 'a')], true);
    expect(segVersions(dir)).toEqual([4]);
    expect(nodeFs.readdirSync(dir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    await store.close();
  });
});

describe('groups kept', () => {
  test('surviveCompactionAndAPowerLossAndCompactionGoesBackToALowerVersionOnceTheyAreAcked', async () => {
    const fs = new CrashFileSystem({ seed: 11 });
    const opts = { fs, segmentBytes: 256, autoCompact: false };
    const store = await LogStore.open('/q', opts);
    const { nextSeq: s } = await store.open();
    const all: StoredItem[] = [];
    for (let i = 0; i < 24; i++)
      all.push(
        i % 3 === 0
          ? { seq: s + i, bytes: enc(`plain ${i} ${'x'.repeat(30)}`) }
          : grouped(s + i, `item ${i} ${'x'.repeat(30)}`, `g${i % 4}`),
      );
    for (const it of all) await store.append([it], true);
    // Acks leave some grouped items in sealed segments: compaction copies them.
    const acked = all.filter((_, i) => i % 2 === 0).map((i) => i.seq);
    await store.ack(acked, true);
    const result = await store.compact();
    expect(result.segmentsRewritten).toBeGreaterThan(0);
    const crashed = await LogStore.open('/q', { ...opts, fs: fs.crash() });
    await crashed.open();
    const left = all.filter((i) => !acked.includes(i.seq));
    expect(readAll(crashed)).toEqual(left.map((i) => [i.seq, dec(i.bytes), i.group ?? '']));
    // Every grouped item acked: the next compaction writes no version-4 segment for what is left.
    await crashed.ack(
      left.filter((i) => i.group !== undefined).map((i) => i.seq),
      true,
    );
    await crashed.compact();
    const versions = crashed
      .inspect()
      .segments.filter((seg) => seg.sealed)
      .map((seg) => seg.version);
    expect(versions.every((v) => v < 4)).toBe(true);
    await crashed.close();
  });
});

describe('damage', () => {
  /** A store whose one segment holds one grouped item; returns the segment's path and the frame's offset. */
  async function oneGrouped(group: string): Promise<{ dir: string; path: string; at: number }> {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append([grouped(s, 'payload', group)], true);
    await store.close();
    return { dir, path: join(dir, segFiles(dir)[0]!), at: SEGMENT_HEADER_BYTES };
  }

  test('aGroupThatIsNotUtf8IsCorruption', async () => {
    const { dir, path, at } = await oneGrouped('ab');
    const b = nodeFs.readFileSync(path);
    const meta = at + FRAME_HEADER_BYTES;
    expect(b[meta]).toBe(META_TAG_GROUP);
    b[meta + 2] = 0xff; // no UTF-8 sequence starts with 0xff
    nodeFs.writeFileSync(path, b);
    fixCrc(path, at);
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('anEmptyGroupIsCorruption', async () => {
    const { dir, path, at } = await oneGrouped('a');
    const b = nodeFs.readFileSync(path);
    const meta = at + FRAME_HEADER_BYTES;
    // tag 6, len 0, and the byte that was the group becomes an unknown tag's header start: the
    // area is re-laid as `06 00` then `ff 00` (an unknown tag of length 0, skipped).
    b[meta + 1] = 0;
    b[meta + 2] = 0xff;
    expect(readU16(b, at + FRAME_OFF_META_BYTES)).toBe(3);
    nodeFs.writeFileSync(path, b);
    fixCrc(path, at);
    await expectOpenError(dir, 'ERR_CORRUPT');
  });

  test('aGroupTagInAVersion3SegmentIsAnUnknownTagAndSkipped', async () => {
    const { dir, path } = await oneGrouped('tenant');
    const b = nodeFs.readFileSync(path);
    b.writeUInt16LE(3, SEG_OFF_VERSION);
    // The header's CRC covers its version: re-forge it as the writer would have.
    b.writeUInt32LE(crc32c32(b.subarray(0, SEG_OFF_HEADER_CRC)), SEG_OFF_HEADER_CRC);
    nodeFs.writeFileSync(path, b);
    const { store } = await openStore(dir);
    expect(readAll(store)).toEqual([[1, 'payload', '']]);
    await store.close();
  });
});
