/** FORMAT.md §14: the example spool file and version-4 cursor decode as the document says, and are what the writers write. */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { FileWindow, FrameReader } from '../../../src/stores/log/engine/frame-reader.js';
import { decodeSpoolHeader, encodeSpoolHeader, SpoolFrames } from '../../../src/stores/log/engine/spool-file.js';
import {
  AckSet,
  decodeCheckpointBody,
  decodeCheckpointHeader,
  decodeCheckpointSpool,
  encodeCheckpoint,
} from '../../../src/stores/log/engine/cursor.js';
import { DeliveryState } from '../../../src/stores/log/engine/delivery-state.js';
import { SPOOL_HEADER_BYTES } from '../../../src/stores/log/engine/format.js';
import type { FileSystem } from '../../../src/fs/file-system.js';

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

function bufferFs(bytes: Uint8Array): FileSystem {
  return {
    read(_fd: number, buf: Uint8Array, offset: number, length: number, position: number): number {
      const n = Math.max(0, Math.min(length, bytes.length - position));
      buf.set(bytes.subarray(position, position + n), offset);
      return n;
    },
  } as unknown as FileSystem;
}

const ID = '00112233445566778899aabbccddeeff';

describe('FORMAT.md §14 examples', () => {
  test('exampleSpoolFileDecodes', () => {
    const b = hexExample('### Example spool file');
    expect(b.length).toBe(121);
    expect(decodeSpoolHeader(b, b.length, ID)).toEqual({ id: ID, createdAt: 1_700_000_000_000 });
    expect(encodeSpoolHeader(ID, 1_700_000_000_000)).toEqual(b.subarray(0, SPOOL_HEADER_BYTES));
    // The same header under another name is damage: the id is checked against the name.
    expect(decodeSpoolHeader(b, b.length, 'f'.repeat(32))).toMatchObject({ kind: 'corrupt' });
    const rules = new SpoolFrames();
    const frames = new FrameReader(new FileWindow(bufferFs(b), 0, b.length, 4096), SPOOL_HEADER_BYTES, rules);
    let verdict = frames.next();
    while (verdict === 'record') {
      frames.accept();
      verdict = frames.next();
    }
    expect(verdict).toBe('end');
    expect(rules.ended).toBe(true);
    expect(rules.records.map((r) => ({ ...r, bytes: new TextDecoder().decode(r.bytes) }))).toEqual([
      { record: 1, bytes: 'hi', priority: 0, notBefore: 0, key: undefined },
      { record: 2, bytes: 'yo', priority: 2, notBefore: 0, key: 'k1' },
    ]);
  });

  test('exampleVersion4CursorDecodesAndIsWhatTheWriterWrites', () => {
    const b = hexExample('### Example version-4 cursor');
    expect(b.length).toBe(96);
    const h = decodeCheckpointHeader(b, b.length);
    expect(h).toMatchObject({ version: 4, lwm: 2, nextSeq: 3, rangeCount: 0, checkpointBytes: 96, spoolCount: 1 });
    if ('kind' in h) throw new Error('not a header');
    expect('kind' in decodeCheckpointBody(b, h)).toBe(false);
    expect(decodeCheckpointSpool(b, h)).toEqual([{ file: ID, records: 2 }]);
    const acks = new AckSet(1);
    acks.add(1, 2);
    expect(new Uint8Array(encodeCheckpoint(acks, 3, 0, new DeliveryState(), [], [{ file: ID, records: 2 }]))).toEqual(b);
  });
});
