/** FORMAT.md and the code mirror each other: decode the hex examples straight out of FORMAT.md. */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FileSystem } from '../../../src/fs/file-system.js';
import { FileWindow, FrameReader } from '../../../src/stores/log/engine/frame-reader.js';
import { SegmentFrames } from '../../../src/stores/log/engine/frame-rules.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { describe, expect, test } from 'vitest';
import { crc32c32 } from '../../../src/stores/log/engine/crc.js';
import {
  AckSet,
  decodeCheckpointBody,
  decodeCheckpointDeliveries,
  decodeCheckpointHeader,
  decodeCheckpointKeys,
  decodeCheckpointSchedules,
  encodeAckRanges,
  encodeCheckpoint,
} from '../../../src/stores/log/engine/cursor.js';
import { decodeDeliveryRecord, markPayloads } from '../../../src/stores/log/engine/delivery-format.js';
import { DeliveryState } from '../../../src/stores/log/engine/delivery-state.js';
import {
  CURSOR_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  RECORD_ACK,
  RECORD_MARK,
  RECORD_ITEM,
  RECORD_SEAL,
  SEAL_FRAME_BYTES,
  SEGMENT_HEADER_BYTES,
  SEGMENT_VERSION_GROUPS,
  SEGMENT_VERSION_KEYED,
  SEGMENT_VERSION_SCHEDULED,
  readU64,
} from '../../../src/stores/log/engine/format.js';
import {
  encodeFrame,
  encodeFrameInPlace,
  frameBytes,
  frameCrcOk,
  newFrameHeader,
  payloadOffset,
  readFrameHeader,
} from '../../../src/stores/log/engine/frame.js';
import { decodeSegmentHeader, decodeTrailingSeal, encodeSealFrame, encodeSegmentHeader } from '../../../src/stores/log/engine/segment.js';

const doc = readFileSync(new URL('../../../FORMAT.md', import.meta.url), 'utf8');

/** The bytes of the ```hex block that follows `heading`; checks each line's offset column. */
function hexExample(heading: string): Uint8Array {
  const at = doc.indexOf(heading);
  expect(at, heading).toBeGreaterThanOrEqual(0);
  const start = doc.indexOf('```hex\n', at) + '```hex\n'.length;
  const end = doc.indexOf('```', start);
  const bytes: number[] = [];
  for (const line of doc.slice(start, end).split('\n')) {
    if (line.trim() === '') continue;
    const [left] = line.split('|');
    const [offset, ...hex] = left!.trim().split(/\s+/);
    expect(Number.parseInt(offset!, 16), line).toBe(bytes.length);
    for (const h of hex) bytes.push(Number.parseInt(h, 16));
  }
  return Uint8Array.from(bytes);
}

/** A FileSystem that only reads `bytes` as the file behind every descriptor (enough for a FileWindow). */
function bufferFs(bytes: Uint8Array): FileSystem {
  return {
    read(_fd: number, buf: Uint8Array, offset: number, length: number, position: number): number {
      const n = Math.max(0, Math.min(length, bytes.length - position));
      buf.set(bytes.subarray(position, position + n), offset);
      return n;
    },
  } as unknown as FileSystem;
}

describe('FORMAT.md examples', () => {
  test('crc32cCheckValueMatchesFormatDoc', () => {
    expect(crc32c32(new TextEncoder().encode('123456789'))).toBe(0xe3069283);
    expect(doc).toContain('0xE3069283');
  });

  test('exampleSegmentDecodes', () => {
    const b = hexExample('### Example segment');
    expect(b.length).toBe(119);
    const header = decodeSegmentHeader(b, b.length);
    expect(header).toEqual({ version: 1, flags: 0, baseSeq: 1, replacesEndSeq: 0 });
    const h = newFrameHeader();
    const got: [number, number, string][] = [];
    let pos = SEGMENT_HEADER_BYTES;
    while (pos < b.length) {
      readFrameHeader(b, pos, h);
      expect(frameCrcOk(b, pos, h)).toBe(true);
      const p = payloadOffset(pos, h);
      got.push([h.type, h.seq, h.type === RECORD_ITEM ? new TextDecoder().decode(b.subarray(p, p + h.length)) : '']);
      pos += frameBytes(h);
    }
    expect(pos).toBe(b.length);
    expect(got).toEqual([
      [RECORD_ITEM, 1, 'hello'],
      [RECORD_ITEM, 2, 'hi'],
      [RECORD_SEAL, 3, ''],
    ]);
    expect(decodeTrailingSeal(b.subarray(b.length - SEAL_FRAME_BYTES))).toEqual({ recordCount: 2, firstSeq: 1, lastSeq: 2, endSeq: 3 });
  });

  test('exampleVersion2SegmentDecodesWithItsSchedulingFields', () => {
    const b = hexExample('### Example version-2 segment');
    expect(b.length).toBe(89);
    const header = decodeSegmentHeader(b, b.length);
    expect(header).toEqual({ version: SEGMENT_VERSION_SCHEDULED, flags: 0, baseSeq: 1, replacesEndSeq: 0 });
    const rules = new SegmentFrames(1, false, SEGMENT_VERSION_SCHEDULED);
    const reader = new FrameReader(new FileWindow(bufferFs(b), 0, b.length, 4096), SEGMENT_HEADER_BYTES, rules);
    const got: [number, string, number, number][] = [];
    while (reader.next() === 'record') {
      const h = reader.h;
      const p = payloadOffset(reader.at, h);
      got.push([
        h.seq,
        new TextDecoder().decode(reader.win.buf.subarray(p, p + h.length)),
        rules.schedule.priority,
        rules.schedule.notBefore,
      ]);
      reader.accept();
    }
    expect(reader.row.verdict).toBe('end');
    expect(got).toEqual([
      [1, 'hi', -2, 1700000000000],
      [2, 'ok', 0, 0],
    ]);
  });

  test('exampleVersion2SegmentIsWhatTheWriterWrites', async () => {
    const b = hexExample('### Example version-2 segment');
    const dir = mkdtempSync(join(tmpdir(), 'pq-format-'));
    try {
      const store = await LogStore.open(join(dir, 'q'), { preallocate: false });
      await store.open();
      await store.append([{ seq: 1, bytes: new TextEncoder().encode('hi'), priority: -2, notBefore: 1700000000000 }], true);
      await store.append([{ seq: 2, bytes: new TextEncoder().encode('ok') }], true);
      await store.close();
      expect(Buffer.from(readFileSync(join(dir, 'q', 'seg-00000000000000000001.log'))).equals(Buffer.from(b))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('exampleSegmentIsWhatTheWriterWrites', () => {
    const b = hexExample('### Example segment');
    const frames = new Uint8Array(2 * FRAME_HEADER_BYTES + 7);
    let end = encodeFrame(frames, 0, 1, RECORD_ITEM, new TextEncoder().encode('hello'));
    end = encodeFrame(frames, end, 2, RECORD_ITEM, new TextEncoder().encode('hi'));
    const written = Buffer.concat([
      encodeSegmentHeader({ flags: 0, baseSeq: 1, replacesEndSeq: 0 }),
      frames.subarray(0, end),
      encodeSealFrame({ recordCount: 2, firstSeq: 1, lastSeq: 2, endSeq: 3 }),
    ]);
    expect(Buffer.from(b).equals(written)).toBe(true);
  });

  test('exampleCursorDecodes', () => {
    const b = hexExample('### Example cursor');
    const h = decodeCheckpointHeader(b, b.length);
    expect(h).toEqual({
      version: 1,
      flags: 0,
      lwm: 1,
      nextSeq: 3,
      rangeCount: 1,
      checkpointBytes: 48,
      rangesAt: 32,
      deliveredBelow: 1,
      markCount: 0,
      deadCount: 0,
      keyCount: 0,
      keysAt: 48,
      keysBytes: 0,
      spoolCount: 0,
      scheduleCount: 0,
      schedulesAt: 48,
      schedulesBytes: 0,
    });
    const acks = decodeCheckpointBody(b, h as Exclude<typeof h, { kind: string }>) as AckSet;
    expect([acks.lwm, acks.starts, acks.ends]).toEqual([1, [2], [3]]);
    const fh = readFrameHeader(b, CURSOR_HEADER_BYTES + 16, newFrameHeader());
    expect(frameCrcOk(b, CURSOR_HEADER_BYTES + 16, fh)).toBe(true);
    expect([fh.type, fh.seq, fh.length]).toEqual([RECORD_ACK, 1, 16]);
    const p = payloadOffset(CURSOR_HEADER_BYTES + 16, fh);
    acks.add(readU64(b, p), readU64(b, p + 8));
    expect([acks.lwm, acks.starts.length]).toEqual([3, 0]);
    // And the writer produces exactly these bytes.
    const a = new AckSet(1);
    a.add(2, 3);
    const rec = new Uint8Array(FRAME_HEADER_BYTES + 16);
    const n = encodeAckRanges([1], rec, FRAME_HEADER_BYTES);
    encodeFrameInPlace(rec, 0, 1, RECORD_ACK, n);
    expect(Buffer.from(b).equals(Buffer.concat([encodeCheckpoint(a, 3, 0), rec]))).toBe(true);
  });

  test('everyFileCheckRowIsInFormatDocWithItsLabel', async () => {
    const { FILE_CHECK_LIST } = await import('../../../src/stores/log/engine/recovery-checks.js');
    const section = doc.slice(doc.indexOf('### 6.2'), doc.indexOf('### 6.3'));
    for (const row of FILE_CHECK_LIST) expect(section).toContain(`| ${row.id} | ${row.label} |`);
    expect(section.match(/^\| \d+ \|/gm)?.length).toBe(FILE_CHECK_LIST.length);
  });

  test('everyTailTableRowIsInFormatDoc', async () => {
    const { TAIL_TABLE } = await import('../../../src/stores/log/engine/tail.js');
    for (const row of TAIL_TABLE) expect(doc).toMatch(new RegExp(`\\| ${row.id} \\|`));
  });

  test('exampleVersion2CursorDecodes', () => {
    const b = hexExample('### Example version-2 cursor');
    const h = decodeCheckpointHeader(b, b.length);
    expect(h).toEqual({
      version: 2,
      flags: 0,
      lwm: 1,
      nextSeq: 3,
      rangeCount: 1,
      checkpointBytes: 156,
      rangesAt: 56,
      deliveredBelow: 2,
      markCount: 1,
      deadCount: 1,
      keyCount: 0,
      keysAt: 72,
      keysBytes: 0,
      spoolCount: 0,
      scheduleCount: 0,
      schedulesAt: 72,
      schedulesBytes: 0,
    });
    const ck = h as Exclude<typeof h, { kind: string }>;
    const acks = decodeCheckpointBody(b, ck) as AckSet;
    expect([acks.lwm, acks.starts, acks.ends]).toEqual([1, [2], [3]]);
    const state = decodeCheckpointDeliveries(b, ck, acks) as DeliveryState;
    expect(state.deliveredBelow).toBe(2);
    expect([...state.marks.values()]).toEqual([{ seq: 1, deliveries: 1, firstDeliveredAt: 5, lastDeliveredAt: 5, lastError: 'e' }]);
    expect(state.dead.map((d) => ({ ...d, bytes: new TextDecoder().decode(d.bytes) }))).toEqual([
      { seq: 2, bytes: 'hi', deliveries: 2, firstDeliveredAt: 3, lastDeliveredAt: 4, deadAt: 6, reason: 'x' },
    ]);
    const fh = readFrameHeader(b, 156, newFrameHeader());
    expect(frameCrcOk(b, 156, fh)).toBe(true);
    expect([fh.type, fh.seq, fh.length]).toEqual([RECORD_MARK, 1, 46]);
    const rec = decodeDeliveryRecord(fh.type, b, payloadOffset(156, fh), fh.length);
    expect(rec).toEqual({
      type: RECORD_MARK,
      below: 3,
      marks: [{ seq: 1, deliveries: 2, firstDeliveredAt: 5, lastDeliveredAt: 7, lastError: '' }],
    });
    expect(156 + FRAME_HEADER_BYTES + fh.length).toBe(b.length);
    // And the writer produces exactly these bytes.
    const d = new DeliveryState();
    d.mark(2, [{ seq: 1, deliveries: 1, firstDeliveredAt: 5, lastDeliveredAt: 5, lastError: 'e' }]);
    d.addDead([
      { seq: 2, bytes: new TextEncoder().encode('hi'), deliveries: 2, firstDeliveredAt: 3, lastDeliveredAt: 4, deadAt: 6, reason: 'x' },
    ]);
    const [p] = markPayloads(3, [
      { mark: { seq: 1, deliveries: 2, firstDeliveredAt: 5, lastDeliveredAt: 7, lastError: '' }, error: new Uint8Array(0) },
    ]);
    const frame = new Uint8Array(FRAME_HEADER_BYTES + p!.payload.length);
    encodeFrame(frame, 0, 1, p!.type, p!.payload);
    expect(Buffer.from(b).equals(Buffer.concat([encodeCheckpoint(acks.clone(), 3, 0, d), frame]))).toBe(true);
  });
  test('exampleVersion3SegmentDecodesWithItsKey', () => {
    const b = hexExample('### Example version-3 segment');
    expect(b.length).toBe(93);
    expect(decodeSegmentHeader(b, b.length)).toEqual({ version: SEGMENT_VERSION_KEYED, flags: 0, baseSeq: 1, replacesEndSeq: 0 });
    const rules = new SegmentFrames(1, false, SEGMENT_VERSION_KEYED);
    const reader = new FrameReader(new FileWindow(bufferFs(b), 0, b.length, 4096), SEGMENT_HEADER_BYTES, rules);
    const got: [number, string, string | undefined, number][] = [];
    while (reader.next() === 'record') {
      const h = reader.h;
      const p = payloadOffset(reader.at, h);
      got.push([h.seq, new TextDecoder().decode(reader.win.buf.subarray(p, p + h.length)), rules.schedule.key, rules.schedule.keyedAt]);
      reader.accept();
    }
    expect(reader.row.verdict).toBe('end');
    expect(got).toEqual([
      [1, 'hi', 'ord-1', 1700000000000],
      [2, 'ok', undefined, 0],
    ]);
  });

  test('exampleVersion3SegmentIsWhatTheWriterWrites', async () => {
    const b = hexExample('### Example version-3 segment');
    const dir = mkdtempSync(join(tmpdir(), 'pq-format-'));
    try {
      const store = await LogStore.open(join(dir, 'q'), { preallocate: false });
      await store.open();
      await store.append([{ seq: 1, bytes: new TextEncoder().encode('hi'), key: 'ord-1', keyedAt: 1700000000000 }], true);
      await store.append([{ seq: 2, bytes: new TextEncoder().encode('ok') }], true);
      await store.close();
      expect(Buffer.from(readFileSync(join(dir, 'q', 'seg-00000000000000000001.log'))).equals(Buffer.from(b))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('exampleVersion4SegmentDecodesWithItsGroupAndIsWhatTheWriterWrites', async () => {
    const b = hexExample('### Example version-4 segment');
    expect(b.length).toBe(85);
    expect(decodeSegmentHeader(b, b.length)).toEqual({ version: SEGMENT_VERSION_GROUPS, flags: 0, baseSeq: 1, replacesEndSeq: 0 });
    const rules = new SegmentFrames(1, false, SEGMENT_VERSION_GROUPS);
    const reader = new FrameReader(new FileWindow(bufferFs(b), 0, b.length, 4096), SEGMENT_HEADER_BYTES, rules);
    const got: [number, string, number, string | undefined][] = [];
    while (reader.next() === 'record') {
      const h = reader.h;
      const p = payloadOffset(reader.at, h);
      got.push([h.seq, new TextDecoder().decode(reader.win.buf.subarray(p, p + h.length)), rules.schedule.priority, rules.schedule.group]);
      reader.accept();
    }
    expect(reader.row.verdict).toBe('end');
    expect(got).toEqual([
      [1, 'hi', 2, 'acme'],
      [2, 'ok', 0, undefined],
    ]);
    const dir = mkdtempSync(join(tmpdir(), 'pq-format-'));
    try {
      const store = await LogStore.open(join(dir, 'q'), { preallocate: false });
      await store.open();
      await store.append([{ seq: 1, bytes: new TextEncoder().encode('hi'), priority: 2, group: 'acme' }], true);
      await store.append([{ seq: 2, bytes: new TextEncoder().encode('ok') }], true);
      await store.close();
      expect(Buffer.from(readFileSync(join(dir, 'q', 'seg-00000000000000000001.log'))).equals(Buffer.from(b))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('exampleVersion5CursorDecodesWithItsScheduleAndIsWhatTheWriterWrites', async () => {
    const b = hexExample('### Example version-5 cursor');
    expect(b.length).toBe(179);
    const h = decodeCheckpointHeader(b, b.length);
    expect(h).toMatchObject({
      version: 5,
      flags: 1,
      lwm: 1,
      nextSeq: 1,
      rangeCount: 0,
      checkpointBytes: 179,
      scheduleCount: 1,
      schedulesAt: 80,
      schedulesBytes: 99,
    });
    const ck = h as Exclude<typeof h, { kind: string }>;
    expect(decodeCheckpointBody(b, ck)).toBeInstanceOf(AckSet);
    const schedule = {
      name: 'tick',
      spec: '{"v":1,"everyMs":60000,"catchUp":"last","maxCatchUp":100,"priority":0}',
      bytes: new TextEncoder().encode('hi'),
      firedThrough: 1700000040000,
      nextAt: 1700000100000,
    };
    expect(decodeCheckpointSchedules(b, ck)).toEqual([schedule]);
    const dir = mkdtempSync(join(tmpdir(), 'pq-format-'));
    try {
      const store = await LogStore.open(join(dir, 'q'), { preallocate: false });
      await store.open();
      await store.putSchedule(schedule, true);
      await store.close();
      expect(Buffer.from(readFileSync(join(dir, 'q', 'cursor.pqc'))).equals(Buffer.from(b))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('exampleVersion3CursorDecodesAndIsWhatTheWriterWrites', () => {
    const b = hexExample('### Example version-3 cursor');
    expect(b.length).toBe(120);
    const h = decodeCheckpointHeader(b, b.length);
    expect(h).toEqual({
      version: 3,
      flags: 0,
      lwm: 1,
      nextSeq: 3,
      rangeCount: 1,
      checkpointBytes: 120,
      rangesAt: 64,
      deliveredBelow: 1,
      markCount: 0,
      deadCount: 0,
      keyCount: 2,
      keysAt: 80,
      keysBytes: 40,
      spoolCount: 0,
      scheduleCount: 0,
      schedulesAt: 120,
      schedulesBytes: 0,
    });
    const ck = h as Exclude<typeof h, { kind: string }>;
    const acks = decodeCheckpointBody(b, ck) as AckSet;
    expect([acks.lwm, acks.starts, acks.ends]).toEqual([1, [2], [3]]);
    const state = decodeCheckpointDeliveries(b, ck, acks) as DeliveryState;
    expect([state.deliveredBelow, state.marks.size, state.dead.length]).toEqual([1, 0, 0]);
    const keys = [
      { key: 'ord-1', seq: 1, keyedAt: 1700000000000 },
      { key: 'b', seq: 2, keyedAt: 1700000000005 },
    ];
    expect(decodeCheckpointKeys(b, ck)).toEqual(keys);
    expect(Buffer.from(b).equals(encodeCheckpoint(acks.clone(), 3, 0, new DeliveryState(), keys))).toBe(true);
  });
});
