/**
 * Delivery marks and dead letters in the cursor file (FORMAT.md §4.1, §4.2, §4.5): each record
 * decodes and is rejected when damaged, version-1 stores stay version 1 until they need a record
 * of version 2, a newer version is refused without a change, and checkpoints and compaction keep
 * every dead letter.
 */
import * as nodeFs from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import {
  decodeDeliveryRecord,
  deadPayloads,
  dropPayloads,
  markPayloads,
  redrivePayloads,
  utf8,
} from '../../../src/stores/log/engine/delivery-format.js';
import {
  CURSOR_FILE,
  CUR_OFF_CHECKPOINT_BYTES,
  CUR_OFF_VERSION,
  CURSOR_FORMAT_VERSION,
  FRAME_HEADER_BYTES,
  FRAME_OFF_LENGTH,
  FRAME_OFF_TYPE,
  RECORD_DEAD,
  RECORD_DROP,
  RECORD_MARK,
  RECORD_REDRIVE,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
} from '../../../src/stores/log/engine/format.js';
import { LogStore, salvageStore } from '../../../src/stores/log/log-store.js';
import type { DeadLetter, DeliveryMark } from '../../../src/contract/store.js';
import {
  cleanupDirs,
  crashCopy,
  dec,
  enc,
  expectOpenError,
  fixCrc,
  flipByte,
  freshDir,
  items,
  openStore,
  readAllTexts,
} from './helpers.js';

afterAll(cleanupDirs);

const mark = (seq: number, deliveries: number, lastError = ''): DeliveryMark => ({
  seq,
  deliveries,
  firstDeliveredAt: 10 + seq,
  lastDeliveredAt: 20 + seq,
  lastError,
});
const dead = (seq: number, text: string, reason = 'r'): DeadLetter => ({
  seq,
  bytes: enc(text),
  deliveries: 3,
  firstDeliveredAt: 1,
  lastDeliveredAt: 2,
  deadAt: 3,
  reason,
});
const encMark = (m: DeliveryMark) => ({ mark: m, error: utf8(m.lastError) });
const encDead = (d: DeadLetter) => ({ dead: d, reason: utf8(d.reason) });

function decode(type: number, payload: Uint8Array) {
  return decodeDeliveryRecord(type, payload, 0, payload.length);
}

function cursorVersion(dir: string): number {
  return readU16(nodeFs.readFileSync(join(dir, CURSOR_FILE)), CUR_OFF_VERSION);
}

/** Offsets of the records after a version-2 checkpoint, with their types. */
function records(path: string): { offset: number; type: number; length: number }[] {
  const b = nodeFs.readFileSync(path);
  const out = [];
  for (let p = readU64(b, CUR_OFF_CHECKPOINT_BYTES); p + FRAME_HEADER_BYTES <= b.length; ) {
    const length = readU32(b, p + FRAME_OFF_LENGTH);
    out.push({ offset: p, type: b[p + FRAME_OFF_TYPE]!, length });
    p += FRAME_HEADER_BYTES + length;
  }
  return out;
}

describe('delivery records decode, and are rejected when damaged', () => {
  const samples: [string, number, Uint8Array][] = [
    ['MARK', RECORD_MARK, markPayloads(4, [encMark(mark(1, 2, 'é!')), encMark(mark(3, 1))])[0]!.payload],
    ['DEAD', RECORD_DEAD, deadPayloads([encDead(dead(2, 'hello', 'poison')), encDead(dead(5, ''))])[0]!.payload],
    ['DROP', RECORD_DROP, dropPayloads([2, 9])[0]!.payload],
    [
      'REDRIVE',
      RECORD_REDRIVE,
      redrivePayloads([
        { from: 2, seq: 10 },
        { from: 5, seq: 11 },
      ])[0]!.payload,
    ],
  ];

  test('everyRecordDecodesToWhatWasWritten', () => {
    expect(decode(RECORD_MARK, samples[0]![2])).toEqual({ type: RECORD_MARK, below: 4, marks: [mark(1, 2, 'é!'), mark(3, 1)] });
    const d = decode(RECORD_DEAD, samples[1]![2]) as unknown as { dead: DeadLetter[] };
    expect(d.dead.map((x) => ({ ...x, bytes: dec(x.bytes) }))).toEqual([
      { ...dead(2, 'hello', 'poison'), bytes: 'hello' },
      { ...dead(5, ''), bytes: '' },
    ]);
    expect(decode(RECORD_DROP, samples[2]![2])).toEqual({ type: RECORD_DROP, seqs: [2, 9] });
    expect(decode(RECORD_REDRIVE, samples[3]![2])).toEqual({
      type: RECORD_REDRIVE,
      moves: [
        { from: 2, seq: 10 },
        { from: 5, seq: 11 },
      ],
    });
  });

  test('aPayloadCutShortOrPaddedIsRejected', () => {
    for (const [name, type, payload] of samples) {
      const entry = type === RECORD_DROP ? 8 : type === RECORD_REDRIVE ? 16 : 0;
      for (let n = 0; n < payload.length; n++) {
        // A fixed-size list cut at an entry boundary is a shorter list, still well-formed.
        if (entry > 0 && n > 0 && n % entry === 0) continue;
        expect(decode(type, payload.subarray(0, n)), `${name} cut to ${n} bytes`).toBeNull();
      }
      const padded = new Uint8Array(payload.length + 1);
      padded.set(payload);
      if (entry === 0) expect(decode(type, padded), `${name} with a trailing byte`).toBeNull();
    }
  });

  test('impossibleFieldsAreRejected', () => {
    const bad = (type: number, payload: Uint8Array, edit: (b: Uint8Array) => void): unknown => {
      const b = payload.slice();
      edit(b);
      return decode(type, b);
    };
    const m = samples[0]![2];
    expect(
      bad(RECORD_MARK, m, (b) => b.fill(0, 20, 28)),
      'deliveries 0',
    ).toBeNull();
    expect(
      bad(RECORD_MARK, m, (b) => b.fill(0, 0, 8)),
      'deliveredBelow 0',
    ).toBeNull();
    expect(
      bad(RECORD_MARK, m, (b) => writeU32(b, 8, 3)),
      'count past the payload',
    ).toBeNull();
    expect(
      bad(RECORD_MARK, m, (b) => b.fill(0xff, 12 + 34, 12 + 35)),
      'invalid UTF-8',
    ).toBeNull();
    const long = markPayloads(1, [{ mark: mark(1, 1), error: new Uint8Array(1025).fill(0x61) }])[0]!.payload;
    expect(decode(RECORD_MARK, long), 'an error text over 1024 bytes').toBeNull();
    const dd = samples[1]![2];
    expect(
      bad(RECORD_DEAD, dd, (b) => writeU32(b, 0, 0)),
      'no dead letters',
    ).toBeNull();
    expect(
      bad(RECORD_DEAD, dd, (b) => b.fill(0xff, 4 + 7, 4 + 8)),
      'seq past 2^53',
    ).toBeNull();
    expect(
      bad(RECORD_DEAD, dd, (b) => writeU32(b, 4 + 42, 0x7fffffff)),
      'payload length past the record',
    ).toBeNull();
    const swapped = deadPayloads([encDead(dead(5, 'a')), encDead(dead(2, 'b'))])[0]!.payload;
    expect(decode(RECORD_DEAD, swapped), 'seqs out of order').toBeNull();
    expect(decode(RECORD_DROP, dropPayloads([9, 2])[0]!.payload), 'drops out of order').toBeNull();
    expect(
      decode(
        RECORD_REDRIVE,
        redrivePayloads([
          { from: 2, seq: 10 },
          { from: 5, seq: 12 },
        ])[0]!.payload,
      ),
      'new seqs not consecutive',
    ).toBeNull();
    expect(decode(RECORD_REDRIVE, redrivePayloads([{ from: 10, seq: 10 }])[0]!.payload), 'a new seq not above its dead letter').toBeNull();
  });

  test('aLargeCallIsSplitIntoRecordsThatEachHoldWholeEntries', () => {
    const big = Array.from({ length: 3 }, (_, i) => encDead(dead(i + 1, 'x'.repeat(600 * 1024))));
    const payloads = deadPayloads(big);
    expect(payloads.length).toBe(3);
    expect(payloads.map((p) => (decode(RECORD_DEAD, p.payload) as unknown as { dead: DeadLetter[] }).dead.map((d) => d.seq))).toEqual([
      [1],
      [2],
      [3],
    ]);
    const drops = dropPayloads(Array.from({ length: 200_000 }, (_, i) => i + 1));
    expect(drops.length).toBeGreaterThan(1);
    expect(drops.reduce((n, p) => n + p.payload.length / 8, 0)).toBe(200_000);
  });
});

/** A store whose cursor holds MARK, DEAD, DROP and REDRIVE records followed by an ACK, copied as a crash leaves it. */
async function storeWithRecords(): Promise<string> {
  const { store, nextSeq: s } = await openStore(freshDir());
  await store.append(items(s, ['a', 'b', 'c', 'd']), true);
  await store.markDelivered(s + 2, [mark(s, 1, 'boom')], true);
  await store.deadLetter([dead(s + 1, 'b'), dead(s + 2, 'c')]);
  await store.dropDeadLetters([s + 2], true);
  await store.redrive([{ from: s + 1, item: { seq: s + 4, bytes: enc('b') } }], true);
  await store.ack([s + 3], true);
  const copy = crashCopy(store.dir);
  await store.close();
  return copy;
}

describe('delivery records in a store', () => {
  test('aCrashedStoreRecoversEveryRecord', async () => {
    const dir = await storeWithRecords();
    expect(records(join(dir, CURSOR_FILE)).map((r) => r.type)).toEqual([RECORD_MARK, RECORD_DEAD, RECORD_DROP, RECORD_REDRIVE, 3]);
    const { store, count } = await openStore(dir);
    expect(count).toBe(2);
    expect(readAllTexts(store)).toEqual(['a', 'b']);
    expect(store.readDeadLetters({ after: 0, limit: 10 })).toEqual([]);
    await store.close();
  });

  for (const type of [RECORD_MARK, RECORD_DEAD, RECORD_DROP, RECORD_REDRIVE]) {
    test(`aFlippedByteInA${type}RecordFollowedByValidDataIsCorrupt`, async () => {
      const dir = await storeWithRecords();
      const path = join(dir, CURSOR_FILE);
      const r = records(path).find((x) => x.type === type)!;
      flipByte(path, r.offset + FRAME_HEADER_BYTES + r.length - 1);
      await expectOpenError(dir, 'ERR_CORRUPT');
    });

    test(`aWellFramedButImpossible${type}RecordIsCorrupt`, async () => {
      const dir = await storeWithRecords();
      const path = join(dir, CURSOR_FILE);
      const r = records(path).find((x) => x.type === type)!;
      const b = nodeFs.readFileSync(path);
      // Zero the first payload field (a count, a bound or a seq): impossible for every type.
      b.fill(0, r.offset + FRAME_HEADER_BYTES, r.offset + FRAME_HEADER_BYTES + 4);
      nodeFs.writeFileSync(path, b);
      fixCrc(path, r.offset);
      await expectOpenError(dir, 'ERR_CORRUPT');
    });
  }

  test('aDeliveryRecordAfterAVersion1CheckpointIsCorrupt', async () => {
    const dir = await storeWithRecords();
    const path = join(dir, CURSOR_FILE);
    // Rewrite the cursor as a version-1 checkpoint with the same ranges, followed by the records.
    const b = nodeFs.readFileSync(path);
    const start = readU64(b, CUR_OFF_CHECKPOINT_BYTES);
    const { encodeCheckpoint, AckSet } = await import('../../../src/stores/log/engine/cursor.js');
    const acks = new AckSet(readU64(b, 8));
    const ck = encodeCheckpoint(acks, readU64(b, 16), 0);
    nodeFs.writeFileSync(path, Buffer.concat([ck, b.subarray(start)]));
    await expectOpenError(dir, 'ERR_CORRUPT');
  });
});

describe('versions', () => {
  test('aStoreThatNeverUsesDeliveriesStaysVersion1', async () => {
    const dir = freshDir();
    let { store, nextSeq: s } = await openStore(dir);
    await store.append(items(s, ['a', 'b', 'c']), true);
    await store.ack([s + 1], true);
    expect(store.inspect().formatVersion).toBe(1);
    await store.close();
    expect(cursorVersion(dir)).toBe(1);
    ({ store } = await openStore(dir));
    expect(cursorVersion(dir)).toBe(1);
    expect(readAllTexts(store)).toEqual(['a', 'c']);
    await store.close();
    expect(cursorVersion(dir)).toBe(1);
  });

  test('anUnchangedBoundMovesAVersion1StoreToVersion2SoThatLaterRecordsAreWrittenWithinTheCall', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append(items(s, ['a', 'b']), true);
    expect(cursorVersion(dir)).toBe(1);
    // What a queue does at open: the bound it recovered, stored again.
    await store.markDelivered(1, [], false);
    expect(cursorVersion(dir)).toBe(2);
    // Now a record is written within the call: nothing to wait for.
    expect(store.markDelivered(s + 1, [], false)).toBeUndefined();
    await store.close();
    const store2 = await LogStore.open(dir);
    expect((await store2.open()).deliveredBelow).toBe(s + 1);
    await store2.close();
  });

  test('aVersion1StoreBecomesVersion2AtItsFirstDeadLetterAndStaysSo', async () => {
    const dir = freshDir();
    let { store, nextSeq: s } = await openStore(dir);
    await store.append(items(s, ['a', 'b']), true);
    await store.close();
    expect(cursorVersion(dir)).toBe(1);
    ({ store } = await openStore(dir));
    expect(cursorVersion(dir)).toBe(1);
    await store.deadLetter([dead(s, 'a')]);
    // Upgraded before the record was written: the file on disk is version 2 now, not at close.
    expect(cursorVersion(dir)).toBe(2);
    expect(store.inspect().formatVersion).toBe(2);
    await store.dropDeadLetters([s], true);
    await store.close();
    ({ store } = await openStore(dir));
    expect(cursorVersion(dir)).toBe(2);
    expect(readAllTexts(store)).toEqual(['b']);
    await store.close();
  });

  test('aCursorOfANewerVersionIsRefusedAndNothingChanges', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append(items(s, ['a']), true);
    await store.deadLetter([dead(s, 'a')]);
    await store.close();
    const path = join(dir, CURSOR_FILE);
    const b = nodeFs.readFileSync(path);
    // The version after the newest this code reads, with the CRC left as it is: the version is
    // checked before the CRC.
    writeU16(b, CUR_OFF_VERSION, CURSOR_FORMAT_VERSION + 1);
    nodeFs.writeFileSync(path, b);
    const e = await expectOpenError(dir, 'ERR_UNSUPPORTED_VERSION');
    expect(e.message).toMatch(new RegExp(`version ${CURSOR_FORMAT_VERSION + 1}`));
    await expect(LogStore.open(dir, { readOnly: true })).rejects.toMatchObject({ code: 'ERR_UNSUPPORTED_VERSION' });
  });
});

describe('checkpoints and compaction', () => {
  test('aLargeDeadLetterQueueIsNotRewrittenForEverySmallBatchOfAcks', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir, { cursorCheckpointBytes: 1024 });
    await store.append([{ seq: s, bytes: new Uint8Array(64 * 1024).fill(7) }], true);
    await store.deadLetter([{ ...dead(s, ''), bytes: new Uint8Array(64 * 1024).fill(7) }]);
    await store.settled();
    const base = store.inspect().cursorBytes;
    let seq = s + 1;
    // Acks of 4 KiB of records: past cursorCheckpointBytes, far below the checkpoint's size.
    for (let i = 0; i < 100; i++) {
      await store.append(items(seq, ['x', 'y']), false);
      await store.ack([seq + 1], false);
      await store.ack([seq], false);
      seq += 2;
      await store.settled();
    }
    expect(store.inspect().cursorBytes).toBeGreaterThan(base + 1024);
    // Once the records outgrow the checkpoint, it is rewritten.
    for (let i = 0; i < 2000 && store.inspect().cursorBytes > base; i++) {
      await store.append(items(seq, ['x', 'y']), false);
      await store.ack([seq + 1], false);
      await store.ack([seq], false);
      seq += 2;
      await store.settled();
    }
    expect(store.inspect().cursorBytes).toBeLessThanOrEqual(base);
    expect(store.readDeadLetters({ after: 0, limit: 5 }).map((d) => d.bytes.length)).toEqual([64 * 1024]);
    await store.close();
  });

  test('compactionKeepsEveryDeadLetterAndResurrectsNone', async () => {
    const dir = freshDir();
    let { store, nextSeq: s } = await openStore(dir, { segmentBytes: 4096, autoCompact: false });
    const texts = Array.from({ length: 200 }, (_, i) => `item-${i}-${'p'.repeat(40)}`);
    for (let i = 0; i < texts.length; i += 10) await store.append(items(s + i, texts.slice(i, i + 10)), true);
    await store.deadLetter([dead(s + 3, texts[3]!), dead(s + 150, texts[150]!)]);
    await store.ack(
      texts.map((_, i) => s + i).filter((_, i) => i !== 3 && i !== 150 && i % 7 !== 0),
      true,
    );
    const result = await store.compact();
    expect(result.segmentsDeleted + result.segmentsRewritten).toBeGreaterThan(0);
    const live = texts.filter((_, i) => i !== 3 && i !== 150 && i % 7 === 0);
    expect(readAllTexts(store)).toEqual(live);
    await store.close();
    ({ store } = await openStore(dir, { segmentBytes: 4096 }));
    expect(readAllTexts(store)).toEqual(live);
    expect(store.readDeadLetters({ after: 0, limit: 10 }).map((d) => [d.seq, dec(d.bytes)])).toEqual([
      [s + 3, texts[3]],
      [s + 150, texts[150]],
    ]);
    await store.close();
  });
});

describe('salvage', () => {
  test('salvageCopiesDeadLettersWithEveryFieldAndTheirBytes', async () => {
    const dir = freshDir();
    const { store, nextSeq: s } = await openStore(dir);
    await store.append(items(s, ['a', 'b', 'c', 'd']), true);
    await store.deadLetter([dead(s + 1, 'b', 'why b'), dead(s + 3, 'd', 'why d')]);
    await store.close();
    const dst = join(freshDir(), 'copy');
    const r = await salvageStore(dir, dst);
    expect([r.copied, r.deadLetters]).toEqual([2, 2]);
    expect(r.deadSeqMap).toEqual([
      { from: s + 1, to: 3, count: 1 },
      { from: s + 3, to: 4, count: 1 },
    ]);
    const { store: copy, count } = await openStore(dst);
    expect(count).toBe(2);
    expect(readAllTexts(copy)).toEqual(['a', 'c']);
    expect(copy.readDeadLetters({ after: 0, limit: 10 }).map((d) => ({ ...d, bytes: dec(d.bytes) }))).toEqual([
      { ...dead(3, 'b', 'why b'), bytes: 'b' },
      { ...dead(4, 'd', 'why d'), bytes: 'd' },
    ]);
    await copy.close();
  });
});
