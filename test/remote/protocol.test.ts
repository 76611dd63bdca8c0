/** The endpoint's frames (FORMAT.md §15): what the encoders write, the decoder reads back, and every malformed input it refuses. */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { QueueError } from '../../src/contract/errors.js';
import { MAX_KEY_BYTES, MAX_REASON_BYTES, MAX_SCHEDULE_NAME_BYTES } from '../../src/contract/store.js';
import {
  DEAD_LETTER_ENTRY_BYTES,
  ERROR_KIND_ABORT,
  ERROR_KIND_OTHER,
  ERROR_KIND_QUEUE,
  ERROR_KIND_RANGE,
  ERROR_KIND_TYPE,
  ERROR_MESSAGE_BYTES_MAX,
  FRAME_HEADER_BYTES,
  HELLO_REPLY_BOUNDS,
  type Frame,
  FrameDecoder,
  GROUPS_LIMIT_MAX,
  PUSH_HEADER_BYTES,
  ProtocolError,
  REQ_PUSH,
  REQ_PURGE,
  REQ_REDRIVE,
  REQ_GROUPS,
  REQ_SCHEDULES,
  REQ_STATS,
  SCHEDULES_HEADER_BYTES,
  SCHEDULES_LIMIT_MAX,
  decodeReply,
  decodeRequest,
  encodeBare,
  encodeCancel,
  encodeDeadLetterList,
  encodeDeadLetters,
  encodeError,
  encodeGroups,
  encodeHello,
  encodeHelloReply,
  encodePush,
  encodeSchedules,
  encodeSelection,
  encodeSeqs,
  encodeValue,
  maxFrameBodyBytes,
  newFrame,
  replyBounds,
  requestBounds,
} from '../../src/remote/protocol.js';
import { Prng } from '../../src/testing/index.js';

const utf8 = new TextEncoder();
const MAX_ITEM = 1024;

/** Every frame `bytes` holds, fed in chunks cut at `cuts`. */
function frames(bytes: Uint8Array, bounds = requestBounds(MAX_ITEM), cuts: number[] = []): Frame[] {
  const decoder = new FrameDecoder(bounds);
  const out: Frame[] = [];
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    decoder.feed(bytes.subarray(at, cut), (f) => out.push({ ...f, body: f.body.slice() }));
    at = cut;
  }
  expect(decoder.partial).toBe(false);
  return out;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function request(frame: Uint8Array) {
  const [f] = frames(frame);
  return decodeRequest(f!);
}

function reply(frame: Uint8Array) {
  // The hello's reply comes before the owner's maxItemBytes is known.
  const [f] = frames(frame, frame[4] === 0x81 ? HELLO_REPLY_BOUNDS : replyBounds(MAX_ITEM));
  return decodeReply(f!);
}

/** A push body edited by `edit`, its header's length left as the encoder wrote it. */
function editedPush(edit: (body: DataView, bytes: Uint8Array) => void, keyed = false): Frame {
  const frame = encodePush(7, {
    payloads: [utf8.encode('ab'), utf8.encode('c')],
    priority: 0,
    notBefore: 0,
    keys: keyed ? [utf8.encode('k1'), utf8.encode('k2')] : undefined,
  });
  const body = frame.slice(FRAME_HEADER_BYTES);
  edit(new DataView(body.buffer), body);
  return { type: REQ_PUSH, id: 7, body, owned: true };
}

describe('endpoint frames', () => {
  test('aPushRoundTripsItsPayloadsKeysPriorityAndNotBefore', () => {
    const payloads = [utf8.encode('first'), new Uint8Array(0), utf8.encode('third')];
    const keys = ['order-1', 'é', 'k'.repeat(MAX_KEY_BYTES)];
    const decoded = request(encodePush(42, { payloads, priority: -128, notBefore: 2 ** 53 - 1, keys: keys.map((k) => utf8.encode(k)) }));
    expect(decoded).toEqual({ type: 'push', id: 42, payloads, priority: -128, notBefore: 2 ** 53 - 1, keys });
    expect(request(encodePush(1, { payloads: [utf8.encode('x')], priority: 127, notBefore: 0, keys: undefined }))).toEqual({
      type: 'push',
      id: 1,
      payloads: [utf8.encode('x')],
      priority: 127,
      notBefore: 0,
      keys: undefined,
    });
  });

  test('everyRequestAndReplyRoundTrips', () => {
    expect(request(encodeHello(1))).toEqual({ type: 'hello', id: 1, version: 1 });
    expect(request(encodeCancel(2, 0xffffffff))).toEqual({ type: 'cancel', id: 2, target: 0xffffffff });
    expect(request(encodeBare(REQ_STATS, 3))).toEqual({ type: 'stats', id: 3 });
    expect(request(encodeDeadLetters(4, 99, 10))).toEqual({ type: 'deadLetters', id: 4, after: 99, limit: 10 });
    expect(request(encodeSelection(REQ_REDRIVE, 5, { seqs: [3, 9], limit: undefined }))).toEqual({
      type: 'redrive',
      id: 5,
      seqs: [3, 9],
      limit: undefined,
    });
    expect(request(encodeSelection(REQ_PURGE, 6, { seqs: undefined, limit: 2 }))).toEqual({
      type: 'purge',
      id: 6,
      seqs: undefined,
      limit: 2,
    });
    expect(reply(encodeHelloReply(1, MAX_ITEM))).toEqual({ type: 'hello', id: 1, version: 1, maxItemBytes: MAX_ITEM });
    expect(reply(encodeSeqs(2, [1, 2 ** 53 - 1]))).toEqual({ type: 'seqs', id: 2, seqs: [1, 2 ** 53 - 1] });
    expect(reply(encodeValue(3, { ready: 1, store: { dir: '/é' } }, 1000)!)).toEqual({
      type: 'value',
      id: 3,
      value: { ready: 1, store: { dir: '/é' } },
    });
    const dead = {
      seq: 4,
      bytes: utf8.encode('payload'),
      deliveries: 3,
      firstDeliveredAt: 1,
      lastDeliveredAt: 2,
      deadAt: 3,
      reason: 'Error: nope',
    };
    expect(reply(encodeDeadLetterList(4, [dead], maxFrameBodyBytes(MAX_ITEM)))).toEqual({ type: 'deadLetters', id: 4, list: [dead] });
  });

  test('errorRepliesKeepTheKindAndTheCodeOfTheError', () => {
    const cases: [unknown, number, string][] = [
      [new QueueError('ERR_KEYS_FULL', 'full'), ERROR_KIND_QUEUE, 'ERR_KEYS_FULL'],
      [new TypeError('type'), ERROR_KIND_TYPE, ''],
      [new RangeError('range'), ERROR_KIND_RANGE, ''],
      [new DOMException('aborted', 'AbortError'), ERROR_KIND_ABORT, ''],
      [new Error('other'), ERROR_KIND_OTHER, ''],
      [Object.assign(new Error('not ours'), { code: 'ERR_INVALID_ARG_VALUE' }), ERROR_KIND_OTHER, ''],
    ];
    for (const [error, kind, code] of cases) {
      const r = reply(encodeError(9, error));
      expect(r).toEqual({ type: 'error', id: 9, kind, code, message: (error as Error).message });
    }
  });

  test('anErrorMessageIsCutToItsBoundBetweenCharacters', () => {
    const r = reply(encodeError(1, new Error('é'.repeat(ERROR_MESSAGE_BYTES_MAX))));
    expect(r.type === 'error' && r.message).toBe('é'.repeat(ERROR_MESSAGE_BYTES_MAX / 2));
  });

  test('oneItemOfMaxItemBytesWithTheLongestKeyFitsOneFrame', () => {
    const frame = encodePush(1, {
      payloads: [new Uint8Array(MAX_ITEM)],
      priority: 0,
      notBefore: 0,
      keys: [utf8.encode('k'.repeat(MAX_KEY_BYTES))],
    });
    expect(frame.length - FRAME_HEADER_BYTES).toBeLessThanOrEqual(maxFrameBodyBytes(MAX_ITEM));
    expect(request(frame).type).toBe('push');
  });

  test('aDeadLetterListIsCutToWhatFitsAndKeepsAtLeastOne', () => {
    const big = {
      seq: 1,
      bytes: new Uint8Array(MAX_ITEM),
      deliveries: 1,
      firstDeliveredAt: 0,
      lastDeliveredAt: 0,
      deadAt: 0,
      reason: 'r'.repeat(MAX_REASON_BYTES),
    };
    const list = Array.from({ length: 200 }, (_, i) => ({ ...big, seq: i + 1 }));
    const max = maxFrameBodyBytes(MAX_ITEM);
    const r = reply(encodeDeadLetterList(1, list, max));
    expect(r.type === 'deadLetters' && r.list.map((d) => d.seq)).toEqual(
      Array.from({ length: Math.floor((max - 4) / (42 + MAX_ITEM + MAX_REASON_BYTES)) }, (_, i) => i + 1),
    );
    const one = reply(encodeDeadLetterList(1, list, 10));
    expect(one.type === 'deadLetters' && one.list.length).toBe(1);
  });

  test('framesCutAtEveryByteDecodeAsFromOneChunk', () => {
    const stream = concat(
      encodeHello(1),
      encodePush(2, {
        payloads: [utf8.encode('abc'), utf8.encode('de')],
        priority: 5,
        notBefore: 77,
        keys: [utf8.encode('x'), utf8.encode('y')],
      }),
      encodeBare(REQ_STATS, 3),
      encodeCancel(4, 2),
    );
    const whole = frames(stream).map(decodeRequest);
    expect(whole.map((r) => r.type)).toEqual(['hello', 'push', 'stats', 'cancel']);
    const bytewise = frames(
      stream,
      requestBounds(MAX_ITEM),
      Array.from({ length: stream.length - 1 }, (_, i) => i + 1),
    ).map(decodeRequest);
    expect(bytewise).toEqual(whole);
  });

  test('aBodyWhollyInOneChunkIsAViewAndOneSpreadOverChunksIsItsOwnBuffer', () => {
    const frame = encodePush(1, { payloads: [utf8.encode('abc')], priority: 0, notBefore: 0, keys: undefined });
    const seen: boolean[] = [];
    const decoder = new FrameDecoder(requestBounds(MAX_ITEM));
    decoder.feed(frame, (f) => seen.push(f.owned));
    decoder.feed(frame.subarray(0, 12), (f) => seen.push(f.owned));
    decoder.feed(frame.subarray(12), (f) => seen.push(f.owned));
    expect(seen).toEqual([false, true]);
  });
});

describe('the decoder refuses malformed frames', () => {
  test('aLengthOverTheBoundIsRefusedFromTheHeaderAloneBeforeAnyBodyArrives', () => {
    const decoder = new FrameDecoder(requestBounds(MAX_ITEM));
    const header = newFrame(REQ_PUSH, 1, 0);
    new DataView(header.buffer).setUint32(0, maxFrameBodyBytes(MAX_ITEM) + 1, true);
    expect(() => decoder.feed(header, () => {})).toThrow(ProtocolError);
    new DataView(header.buffer).setUint32(0, 0xffffffff, true);
    expect(() => new FrameDecoder(requestBounds(MAX_ITEM)).feed(header, () => {})).toThrow(/body of 4294967295 bytes/);
  });

  test('aLengthUnderItsTypesMinimumOrAnUnknownTypeIsRefused', () => {
    expect(() => new FrameDecoder(requestBounds(MAX_ITEM)).feed(newFrame(REQ_PUSH, 1, 3), () => {})).toThrow(ProtocolError);
    expect(() => new FrameDecoder(requestBounds(MAX_ITEM)).feed(newFrame(0x7e, 1, 0), () => {})).toThrow(/frame type 0x7e/);
    // A reply type is no request, and a request no reply.
    expect(() => new FrameDecoder(requestBounds(MAX_ITEM)).feed(encodeSeqs(1, [1]), () => {})).toThrow(ProtocolError);
    expect(() => new FrameDecoder(HELLO_REPLY_BOUNDS).feed(encodeSeqs(1, [1]), () => {})).toThrow(ProtocolError);
    expect(() => new FrameDecoder(replyBounds(MAX_ITEM)).feed(encodeHello(1), () => {})).toThrow(ProtocolError);
  });

  test('aFrameCutShortLeavesTheDecoderPartial', () => {
    const frame = encodePush(1, { payloads: [utf8.encode('abc')], priority: 0, notBefore: 0, keys: undefined });
    for (const cut of [1, FRAME_HEADER_BYTES, frame.length - 1]) {
      const decoder = new FrameDecoder(requestBounds(MAX_ITEM));
      const got: Frame[] = [];
      decoder.feed(frame.subarray(0, cut), (f) => got.push(f));
      expect(got).toEqual([]);
      expect(decoder.partial).toBe(true);
    }
  });

  test('aPushWhoseFieldsDoNotAddUpIsRefused', () => {
    const bad: [string, Frame][] = [
      ['unknown flag', editedPush((_, b) => (b[0] = 0x80))],
      ['reserved field', editedPush((v) => v.setUint16(2, 1, true))],
      ['no items', editedPush((v) => v.setUint32(4, 0, true))],
      ['more items than bytes', editedPush((v) => v.setUint32(4, 1000, true))],
      ['unsafe notBefore', editedPush((v) => v.setUint32(12, 0x200000, true))],
      ['item past the end', editedPush((v) => v.setUint32(PUSH_HEADER_BYTES, 99, true))],
      ['bytes after the last item', editedPush((v) => v.setUint32(PUSH_HEADER_BYTES, 1, true))],
      ['empty key', editedPush((_, b) => (b[PUSH_HEADER_BYTES + 4] = 0), true)],
      ['key past the end', editedPush((_, b) => (b[PUSH_HEADER_BYTES + 4] = 200), true)],
      ['key not UTF-8', editedPush((_, b) => (b[PUSH_HEADER_BYTES + 5] = 0xff), true)],
      ['lone surrogate key', editedPush((_, b) => b.set([0xed, 0xa0], PUSH_HEADER_BYTES + 5), true)],
    ];
    for (const [what, frame] of bad) expect(() => decodeRequest(frame), what).toThrow(ProtocolError);
  });

  test('aHelloWithoutTheMagicOrASelectionThatDoesNotAddUpIsRefused', () => {
    const hello = encodeHello(1).slice(FRAME_HEADER_BYTES);
    hello[0] = 0;
    expect(() => decodeRequest({ type: 0x01, id: 1, body: hello, owned: true })).toThrow(/magic/);
    const sel = encodeSelection(REQ_REDRIVE, 1, { seqs: [1], limit: undefined }).slice(FRAME_HEADER_BYTES);
    sel[4] = 2; // two seqs claimed, one present
    expect(() => decodeRequest({ type: REQ_REDRIVE, id: 1, body: sel, owned: true })).toThrow(ProtocolError);
    const limitless = encodeSelection(REQ_PURGE, 1, { seqs: undefined, limit: undefined }).slice(FRAME_HEADER_BYTES);
    limitless[8] = 1; // a limit value without its flag
    expect(() => decodeRequest({ type: REQ_PURGE, id: 1, body: limitless, owned: true })).toThrow(ProtocolError);
  });

  test('groupsAndSchedulesRequestsRoundTrip', () => {
    expect(request(encodeGroups(7, GROUPS_LIMIT_MAX))).toEqual({ type: 'groups', id: 7, limit: GROUPS_LIMIT_MAX });
    expect(request(encodeSchedules(8, new Uint8Array(0), SCHEDULES_LIMIT_MAX))).toEqual({
      type: 'schedules',
      id: 8,
      after: '',
      limit: SCHEDULES_LIMIT_MAX,
    });
    // A name that starts with U+FEFF is the name, not a byte-order mark; the longest fits the bound.
    for (const after of ['\ufeffnightly é', 'n'.repeat(MAX_SCHEDULE_NAME_BYTES)]) {
      expect(request(encodeSchedules(9, utf8.encode(after), 1))).toEqual({ type: 'schedules', id: 9, after, limit: 1 });
    }
  });

  test('aGroupsOrSchedulesRequestOutOfRangeOrThatDoesNotAddUpIsRefused', () => {
    const body = (frame: Uint8Array): Uint8Array => frame.slice(FRAME_HEADER_BYTES);
    const schedules = (edit: (b: Uint8Array) => void, after = 'abc'): Frame => {
      const b = body(encodeSchedules(1, utf8.encode(after), 5));
      edit(b);
      return { type: REQ_SCHEDULES, id: 1, body: b, owned: true };
    };
    const bad: [string, Frame][] = [
      ['groups limit 0', { type: REQ_GROUPS, id: 1, body: body(encodeGroups(1, 0)), owned: true }],
      ['groups limit over its bound', { type: REQ_GROUPS, id: 1, body: body(encodeGroups(1, GROUPS_LIMIT_MAX + 1)), owned: true }],
      ['schedules limit 0', schedules((b) => b.fill(0, 0, 4))],
      ['schedules limit over its bound', schedules((b) => new DataView(b.buffer).setUint32(0, SCHEDULES_LIMIT_MAX + 1, true))],
      ['reserved byte', schedules((b) => (b[6] = 1))],
      ['name longer than the body', schedules((b) => (b[4] = 4))],
      ['name shorter than the body', schedules((b) => (b[4] = 2))],
      ['name not UTF-8', schedules((b) => (b[SCHEDULES_HEADER_BYTES + 1] = 0xff))],
      ['lone surrogate in the name', schedules((b) => b.set([0xed, 0xa0, 0x80], SCHEDULES_HEADER_BYTES))],
    ];
    for (const [what, frame] of bad) expect(() => decodeRequest(frame), what).toThrow(ProtocolError);
    // Bodies outside their type's bounds never reach the decoder: refused from the header alone.
    expect(() => new FrameDecoder(requestBounds(MAX_ITEM)).feed(newFrame(REQ_GROUPS, 1, 5), () => {})).toThrow(ProtocolError);
    expect(() =>
      new FrameDecoder(requestBounds(MAX_ITEM)).feed(
        newFrame(REQ_SCHEDULES, 1, SCHEDULES_HEADER_BYTES + MAX_SCHEDULE_NAME_BYTES + 1),
        () => {},
      ),
    ).toThrow(ProtocolError);
    expect(() => new FrameDecoder(requestBounds(MAX_ITEM)).feed(newFrame(REQ_SCHEDULES, 1, SCHEDULES_HEADER_BYTES - 1), () => {})).toThrow(
      ProtocolError,
    );
  });

  test('repliesThatDoNotAddUpAreRefused', () => {
    const seqs = encodeSeqs(1, [1, 2]);
    seqs[FRAME_HEADER_BYTES] = 3;
    expect(() => reply(seqs)).toThrow(ProtocolError);
    const zero = encodeSeqs(1, [0]);
    expect(() => reply(zero)).toThrow(/positive/);
    const value = encodeValue(1, 'x', 100)!;
    value[FRAME_HEADER_BYTES] = 0x7b; // '{' then 'x"'
    expect(() => reply(value)).toThrow(/JSON/);
    const error = encodeError(1, new QueueError('ERR_CLOSED', 'closed'));
    error[FRAME_HEADER_BYTES + 1] = 3; // a code of 3 bytes: 'ERR' is no code
    expect(() => reply(error)).toThrow(ProtocolError);
    const hello = encodeHelloReply(1, 0);
    expect(() => reply(hello)).toThrow(/maxItemBytes 0/);
  });

  test('randomBytesOnlyEverThrowProtocolErrors', () => {
    const seed = 0x5eed;
    const rnd = new Prng(seed);
    for (let run = 0; run < 2000; run++) {
      const bytes = rnd.bytes(rnd.int(64));
      for (const bounds of [requestBounds(MAX_ITEM), replyBounds(MAX_ITEM)]) {
        try {
          new FrameDecoder(bounds).feed(bytes, (f) => (bounds.has(REQ_PUSH) ? decodeRequest(f) : decodeReply(f)));
        } catch (error) {
          expect(error, `seed ${seed} run ${run}`).toBeInstanceOf(ProtocolError);
        }
      }
    }
  });
});

describe('FORMAT.md §15', () => {
  const doc = readFileSync(new URL('../../FORMAT.md', import.meta.url), 'utf8');

  /** The bytes of the `n`-th ```hex block after `heading`; checks each line's offset column. */
  function hexExample(heading: string, n: number): Uint8Array {
    let at = doc.indexOf(heading);
    expect(at, heading).toBeGreaterThanOrEqual(0);
    for (let i = 0; i <= n; i++) at = doc.indexOf('```hex\n', at + 1);
    const start = at + '```hex\n'.length;
    const end = doc.indexOf('```', start);
    const bytes: number[] = [];
    for (const line of doc.slice(start, end).split('\n')) {
      if (line.trim() === '') continue;
      const [offset, ...hex] = line.split('|')[0]!.trim().split(/\s+/);
      expect(Number.parseInt(offset!, 16), line).toBe(bytes.length);
      for (const h of hex) bytes.push(Number.parseInt(h, 16));
    }
    return Uint8Array.from(bytes);
  }

  test('theExampleRequestsDecodeAndEncodeBackToTheSameBytes', () => {
    const bytes = hexExample('### Example endpoint frames', 0);
    const decoded = frames(bytes).map(decodeRequest);
    expect(decoded).toEqual([
      { type: 'hello', id: 1, version: 1 },
      { type: 'push', id: 2, payloads: [utf8.encode('job-1'), utf8.encode('job-2')], priority: 5, notBefore: 0, keys: ['a', 'b'] },
    ]);
    expect(
      concat(
        encodeHello(1),
        encodePush(2, {
          payloads: [utf8.encode('job-1'), utf8.encode('job-2')],
          priority: 5,
          notBefore: 0,
          keys: [utf8.encode('a'), utf8.encode('b')],
        }),
      ),
    ).toEqual(bytes);
  });

  test('theExampleRepliesDecodeAndEncodeBackToTheSameBytes', () => {
    const bytes = hexExample('### Example endpoint frames', 1);
    const decoder = new FrameDecoder(HELLO_REPLY_BOUNDS);
    const decoded: unknown[] = [];
    decoder.feed(bytes, (frame) => {
      const r = decodeReply(frame);
      // As a client does: the bounds of the other replies follow from the hello's maxItemBytes.
      if (r.type === 'hello') decoder.bounds = replyBounds(r.maxItemBytes);
      decoded.push(r);
    });
    expect(decoded).toEqual([
      { type: 'hello', id: 1, version: 1, maxItemBytes: 16 * 1024 * 1024 },
      { type: 'seqs', id: 2, seqs: [7, 8] },
      { type: 'error', id: 3, kind: ERROR_KIND_QUEUE, code: 'ERR_CLOSED', message: 'closed' },
    ]);
    expect(
      concat(encodeHelloReply(1, 16 * 1024 * 1024), encodeSeqs(2, [7, 8]), encodeError(3, new QueueError('ERR_CLOSED', 'closed'))),
    ).toEqual(bytes);
  });

  test('theDocumentedSizesAreTheCodes', () => {
    expect(doc).toContain('(`FRAME_HEADER_BYTES` = 9)');
    expect(FRAME_HEADER_BYTES).toBe(9);
    expect(doc).toContain('`FRAME_OVERHEAD_BYTES` (65,536)');
    expect(maxFrameBodyBytes(0)).toBe(65_536);
    expect(doc).toContain('(`DEAD_LETTER_ENTRY_BYTES` = 42)');
    expect(DEAD_LETTER_ENTRY_BYTES).toBe(42);
    expect(PUSH_HEADER_BYTES).toBe(16);
    expect(doc).toContain('(`SCHEDULES_HEADER_BYTES` = 8)');
    expect(SCHEDULES_HEADER_BYTES).toBe(8);
    expect(doc).toContain(`(1 to \`GROUPS_LIMIT_MAX\` = ${GROUPS_LIMIT_MAX})`);
    expect(doc).toContain(`(1 to \`SCHEDULES_LIMIT_MAX\` = ${SCHEDULES_LIMIT_MAX})`);
    expect(doc).toContain(`a SCHEDULES ${SCHEDULES_HEADER_BYTES} to ${SCHEDULES_HEADER_BYTES + MAX_SCHEDULE_NAME_BYTES}`);
  });
});
