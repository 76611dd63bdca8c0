// Implements FORMAT.md §15, "Endpoint frames": the vocabulary, the encoders and the decoder
// that the owner's server (./server.ts) and a producer's client (./client.ts) share.
//
// Every byte a peer sends is hostile input. The decoder reads a frame's 9-byte header, checks its
// type and its body length against the bounds of that type BEFORE it allocates or waits for the
// body, and decodes a body only when every length inside it fits what is left. A frame that breaks
// a rule is a ProtocolError: the server closes that connection, and only it.
import { QueueError } from '../contract/errors.js';
import { isValidKey } from '../contract/records/keys.js';
import { readU16, readU32, readU64, writeU16, writeU32, writeU64, MAX_PAYLOAD_BYTES_CAP } from '../stores/log/engine/format.js';
import { MAX_KEY_BYTES, MAX_REASON_BYTES, MAX_SCHEDULE_NAME_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../contract/store.js';

// ---- Vocabulary ----

/** The version this build speaks; a hello naming another is refused with `ERR_UNSUPPORTED_VERSION`. */
export const PROTOCOL_VERSION = 1;
/** "PQEP": the first bytes of a hello, so that a stray program talking to the socket is told apart. */
export const HELLO_MAGIC = 0x50455150;

/** length u32 | type u8 | request id u32 */
export const FRAME_HEADER_BYTES = 9;
export const FH_OFF_LENGTH = 0;
export const FH_OFF_TYPE = 4;
export const FH_OFF_ID = 5;

// Requests (client to owner).
export const REQ_HELLO = 0x01;
export const REQ_PUSH = 0x02;
export const REQ_CANCEL = 0x03;
export const REQ_STATS = 0x04;
export const REQ_DEAD_LETTERS = 0x05;
export const REQ_REDRIVE = 0x06;
export const REQ_PURGE = 0x07;
export const REQ_COMPACT = 0x08;
/** The owner's hand-out and ack latencies of the last minutes (src/remote/timings.ts). */
export const REQ_TIMINGS = 0x09;
/** The owner's groups with items in flight or waiting aside, the busiest first (src/core/group-report.ts). */
export const REQ_GROUPS = 0x0a;
/** A page of the owner's schedules, by name (src/core/schedules.ts). */
export const REQ_SCHEDULES = 0x0b;
// Replies (owner to client).
export const REP_HELLO = 0x81;
export const REP_SEQS = 0x82;
export const REP_VALUE = 0x83;
export const REP_DEAD_LETTERS = 0x84;
export const REP_ERROR = 0x8f;

/** magic u32 | version u16 | reserved u16 (0) */
export const HELLO_BODY_BYTES = 8;
/** version u16 | reserved u16 (0) | maxItemBytes u32 */
export const HELLO_REPLY_BYTES = 8;
/** flags u8 | priority i8 | reserved u16 (0) | count u32 | notBefore u64 */
export const PUSH_HEADER_BYTES = 16;
export const PUSH_FLAG_KEYED = 0x01;
/** payload length u32, then (keyed pushes only) key length u8 and the key's UTF-8 bytes, then the payload. */
export const ITEM_HEADER_BYTES = 4;
/** target request id u32 */
export const CANCEL_BODY_BYTES = 4;
/** after u64 | limit u32 */
export const DEAD_LETTERS_BODY_BYTES = 12;
/** flags u8 | reserved 3 bytes (0) | seq count u32 | limit u64, then the seqs (u64 each) */
export const SELECTION_HEADER_BYTES = 16;
export const SELECT_FLAG_SEQS = 0x01;
export const SELECT_FLAG_LIMIT = 0x02;
/** limit u32 */
export const GROUPS_BODY_BYTES = 4;
/**
 * Groups one GROUPS reply lists at most. A hundred entries of the longest group names, each byte
 * of them a control character that JSON writes as six, and the largest figures take 48,217 bytes: within
 * FRAME_OVERHEAD_BYTES, so the reply fits a frame whatever the queue's `maxItemBytes`.
 */
export const GROUPS_LIMIT_MAX = 100;
/** limit u32 | after length u8 | reserved 3 bytes (0), then the UTF-8 bytes of the name to list after */
export const SCHEDULES_HEADER_BYTES = 8;
/** Schedules one SCHEDULES reply lists at most (fewer when they would not fit one frame). */
export const SCHEDULES_LIMIT_MAX = 100;
/** count u32, then the seqs (u64 each) */
export const SEQS_HEADER_BYTES = 4;
/** count u32, then the entries */
export const DEAD_LETTERS_HEADER_BYTES = 4;
/** seq u64 | deliveries u32 | firstDeliveredAt u64 | lastDeliveredAt u64 | deadAt u64 | reason length u16 | payload length u32, then the reason and the payload */
export const DEAD_LETTER_ENTRY_BYTES = 42;
/** kind u8 | code length u8 | message length u16, then the code (ASCII) and the message (UTF-8) */
export const ERROR_HEADER_BYTES = 4;
export const ERROR_CODE_BYTES_MAX = 32;
export const ERROR_MESSAGE_BYTES_MAX = 4096;
export const ERROR_BODY_BYTES_MAX = ERROR_HEADER_BYTES + ERROR_CODE_BYTES_MAX + ERROR_MESSAGE_BYTES_MAX;

/** What an error reply's kind byte says the client throws. */
export const ERROR_KIND_QUEUE = 0;
export const ERROR_KIND_TYPE = 1;
export const ERROR_KIND_RANGE = 2;
/** The push was withdrawn by a cancel: nothing of it is stored. */
export const ERROR_KIND_ABORT = 3;
export const ERROR_KIND_OTHER = 4;

/**
 * What a frame body may hold beyond `maxItemBytes` of payload: a push header and one item's header
 * with the longest key, or a dead-letter entry with the longest reason, and room for the queue's
 * figures (`stats`), with margin. Fixed, so that the bound depends on the store's limit alone.
 */
export const FRAME_OVERHEAD_BYTES = 64 * 1024;

/**
 * The largest frame body either side accepts from a queue whose `maxItemBytes` is `maxItemBytes`:
 * one push of that many payload bytes plus {@link FRAME_OVERHEAD_BYTES}. A push of more is sent as
 * several frames; a longer list of dead letters is cut to what fits.
 */
export function maxFrameBodyBytes(maxItemBytes: number): number {
  return maxItemBytes + FRAME_OVERHEAD_BYTES;
}

/** A frame that breaks FORMAT.md §15: the peer is closed, nothing of the frame is acted on. */
export class ProtocolError extends Error {
  readonly code = 'ERR_PROTOCOL';
  override name = 'ProtocolError';
}

// ---- Frames ----

export interface Frame {
  readonly type: number;
  readonly id: number;
  readonly body: Uint8Array;
  /**
   * True when `body` is a buffer of this frame's own; false when it is a view into the chunk the
   * bytes arrived in, which a payload kept for long must be copied out of.
   */
  readonly owned: boolean;
}

/** A frame of `type` for request `id`, with `bodyBytes` of body after the header (to be filled in at FRAME_HEADER_BYTES). */
export function newFrame(type: number, id: number, bodyBytes: number): Uint8Array {
  const frame = new Uint8Array(FRAME_HEADER_BYTES + bodyBytes);
  writeU32(frame, FH_OFF_LENGTH, bodyBytes);
  frame[FH_OFF_TYPE] = type;
  writeU32(frame, FH_OFF_ID, id);
  return frame;
}

/** The body bounds of each frame type a side accepts: [min, max] bytes; a type absent is refused. */
export type FrameBounds = ReadonlyMap<number, readonly [number, number]>;

/** What the owner accepts from a client of a queue whose `maxItemBytes` is given. */
export function requestBounds(maxItemBytes: number): FrameBounds {
  const max = maxFrameBodyBytes(maxItemBytes);
  return new Map<number, readonly [number, number]>([
    [REQ_HELLO, [HELLO_BODY_BYTES, HELLO_BODY_BYTES]],
    [REQ_PUSH, [PUSH_HEADER_BYTES + ITEM_HEADER_BYTES, max]],
    [REQ_CANCEL, [CANCEL_BODY_BYTES, CANCEL_BODY_BYTES]],
    [REQ_STATS, [0, 0]],
    [REQ_DEAD_LETTERS, [DEAD_LETTERS_BODY_BYTES, DEAD_LETTERS_BODY_BYTES]],
    [REQ_REDRIVE, [SELECTION_HEADER_BYTES, max]],
    [REQ_PURGE, [SELECTION_HEADER_BYTES, max]],
    [REQ_COMPACT, [0, 0]],
    [REQ_TIMINGS, [0, 0]],
    [REQ_GROUPS, [GROUPS_BODY_BYTES, GROUPS_BODY_BYTES]],
    [REQ_SCHEDULES, [SCHEDULES_HEADER_BYTES, SCHEDULES_HEADER_BYTES + MAX_SCHEDULE_NAME_BYTES]],
  ]);
}

/** What a client accepts before the owner said its `maxItemBytes`: the hello's reply, or an error. */
export const HELLO_REPLY_BOUNDS: FrameBounds = new Map<number, readonly [number, number]>([
  [REP_HELLO, [HELLO_REPLY_BYTES, HELLO_REPLY_BYTES]],
  [REP_ERROR, [ERROR_HEADER_BYTES, ERROR_BODY_BYTES_MAX]],
]);

/** What a client accepts from the owner of a queue whose `maxItemBytes` is given. */
export function replyBounds(maxItemBytes: number): FrameBounds {
  const max = maxFrameBodyBytes(maxItemBytes);
  return new Map<number, readonly [number, number]>([
    [REP_SEQS, [SEQS_HEADER_BYTES, max]],
    [REP_VALUE, [1, max]],
    [REP_DEAD_LETTERS, [DEAD_LETTERS_HEADER_BYTES, max]],
    [REP_ERROR, [ERROR_HEADER_BYTES, ERROR_BODY_BYTES_MAX]],
  ]);
}

/**
 * Splits a byte stream into frames. A header's type and length are checked against `bounds`
 * before the body is allocated or waited for; a body wholly inside one chunk is handed out as a
 * view of that chunk (`owned: false`), one spread over chunks is gathered into a buffer of its
 * exact length.
 */
export class FrameDecoder {
  bounds: FrameBounds;
  readonly #header = new Uint8Array(FRAME_HEADER_BYTES);
  #headerFill = 0;
  #body: Uint8Array | null = null;
  #bodyFill = 0;
  #type = 0;
  #id = 0;

  constructor(bounds: FrameBounds) {
    this.bounds = bounds;
  }

  /** True while part of a frame has arrived and the rest has not: the stream may not end here. */
  get partial(): boolean {
    return this.#headerFill > 0 || this.#body !== null;
  }

  /** Hand every frame complete in `chunk` to `onFrame`, in order. Throws ProtocolError at the first bad header. */
  feed(chunk: Uint8Array, onFrame: (frame: Frame) => void): void {
    let at = 0;
    const end = chunk.length;
    while (at < end) {
      if (this.#body !== null) {
        const n = Math.min(this.#body.length - this.#bodyFill, end - at);
        this.#body.set(chunk.subarray(at, at + n), this.#bodyFill);
        this.#bodyFill += n;
        at += n;
        if (this.#bodyFill === this.#body.length) {
          const body = this.#body;
          this.#body = null;
          onFrame({ type: this.#type, id: this.#id, body, owned: true });
        }
        continue;
      }
      if (this.#headerFill === 0 && end - at >= FRAME_HEADER_BYTES) {
        // The common case: the whole header, and often the whole body, is in this chunk.
        const length = this.#check(chunk, at);
        at += FRAME_HEADER_BYTES;
        if (end - at >= length) {
          onFrame({ type: this.#type, id: this.#id, body: chunk.subarray(at, at + length), owned: false });
          at += length;
        } else {
          this.#startBody(length);
        }
        continue;
      }
      const n = Math.min(FRAME_HEADER_BYTES - this.#headerFill, end - at);
      this.#header.set(chunk.subarray(at, at + n), this.#headerFill);
      this.#headerFill += n;
      at += n;
      if (this.#headerFill < FRAME_HEADER_BYTES) continue;
      this.#headerFill = 0;
      const length = this.#check(this.#header, 0);
      if (length === 0) onFrame({ type: this.#type, id: this.#id, body: new Uint8Array(0), owned: true });
      else this.#startBody(length);
    }
  }

  /** Reads and bounds the header at `at` of `bytes`; returns the body length. */
  #check(bytes: Uint8Array, at: number): number {
    const length = readU32(bytes, at + FH_OFF_LENGTH);
    const type = bytes[at + FH_OFF_TYPE]!;
    const bounds = this.bounds.get(type);
    if (bounds === undefined) throw new ProtocolError(`frame type 0x${type.toString(16).padStart(2, '0')} is not one this side accepts`);
    if (length < bounds[0] || length > bounds[1]) {
      throw new ProtocolError(
        `frame type 0x${type.toString(16).padStart(2, '0')} has a body of ${length} bytes; it takes ${bounds[0]} to ${bounds[1]}`,
      );
    }
    this.#type = type;
    this.#id = readU32(bytes, at + FH_OFF_ID);
    return length;
  }

  #startBody(length: number): void {
    this.#body = new Uint8Array(length);
    this.#bodyFill = 0;
  }
}

// ---- Requests ----

export function encodeHello(id: number, version = PROTOCOL_VERSION): Uint8Array {
  const frame = newFrame(REQ_HELLO, id, HELLO_BODY_BYTES);
  writeU32(frame, FRAME_HEADER_BYTES, HELLO_MAGIC);
  writeU16(frame, FRAME_HEADER_BYTES + 4, version);
  return frame;
}

export interface PushRequest {
  readonly payloads: Uint8Array[];
  /** An integer from PRIORITY_MIN to PRIORITY_MAX. */
  readonly priority: number;
  /** Ms since the epoch, 0: none. */
  readonly notBefore: number;
  /** One key per payload, as UTF-8 bytes, or undefined. */
  readonly keys: Uint8Array[] | undefined;
}

/** Bytes item `i` of a push takes in a frame body. */
export function pushItemBytes(payload: Uint8Array, key: Uint8Array | undefined): number {
  return ITEM_HEADER_BYTES + (key === undefined ? 0 : 1 + key.length) + payload.length;
}

/** One push frame for `request` (its items must fit one body: see `maxFrameBodyBytes`). */
export function encodePush(id: number, request: PushRequest): Uint8Array {
  const { payloads, keys } = request;
  let bodyBytes = PUSH_HEADER_BYTES;
  for (let i = 0; i < payloads.length; i++) bodyBytes += pushItemBytes(payloads[i]!, keys?.[i]);
  const frame = newFrame(REQ_PUSH, id, bodyBytes);
  let at = FRAME_HEADER_BYTES;
  frame[at] = keys === undefined ? 0 : PUSH_FLAG_KEYED;
  frame[at + 1] = request.priority & 0xff;
  writeU32(frame, at + 4, payloads.length);
  writeU64(frame, at + 8, request.notBefore);
  at += PUSH_HEADER_BYTES;
  for (let i = 0; i < payloads.length; i++) {
    const payload = payloads[i]!;
    writeU32(frame, at, payload.length);
    at += ITEM_HEADER_BYTES;
    const key = keys?.[i];
    if (key !== undefined) {
      frame[at++] = key.length;
      frame.set(key, at);
      at += key.length;
    }
    frame.set(payload, at);
    at += payload.length;
  }
  return frame;
}

export function encodeCancel(id: number, target: number): Uint8Array {
  const frame = newFrame(REQ_CANCEL, id, CANCEL_BODY_BYTES);
  writeU32(frame, FRAME_HEADER_BYTES, target);
  return frame;
}

/** A request with no body: stats, compact or timings. */
export function encodeBare(type: typeof REQ_STATS | typeof REQ_COMPACT | typeof REQ_TIMINGS, id: number): Uint8Array {
  return newFrame(type, id, 0);
}

export function encodeDeadLetters(id: number, after: number, limit: number): Uint8Array {
  const frame = newFrame(REQ_DEAD_LETTERS, id, DEAD_LETTERS_BODY_BYTES);
  writeU64(frame, FRAME_HEADER_BYTES, after);
  writeU32(frame, FRAME_HEADER_BYTES + 8, limit);
  return frame;
}

/** GROUPS: the busiest `limit` groups, 1 to {@link GROUPS_LIMIT_MAX}. */
export function encodeGroups(id: number, limit: number): Uint8Array {
  const frame = newFrame(REQ_GROUPS, id, GROUPS_BODY_BYTES);
  writeU32(frame, FRAME_HEADER_BYTES, limit);
  return frame;
}

/** SCHEDULES: the first `limit` (1 to {@link SCHEDULES_LIMIT_MAX}) whose names sort after `after` (UTF-8, empty: from the first). */
export function encodeSchedules(id: number, after: Uint8Array, limit: number): Uint8Array {
  const frame = newFrame(REQ_SCHEDULES, id, SCHEDULES_HEADER_BYTES + after.length);
  writeU32(frame, FRAME_HEADER_BYTES, limit);
  frame[FRAME_HEADER_BYTES + 4] = after.length;
  frame.set(after, FRAME_HEADER_BYTES + SCHEDULES_HEADER_BYTES);
  return frame;
}

export interface Selection {
  readonly seqs: readonly number[] | undefined;
  /** A positive safe integer, or undefined: every one. */
  readonly limit: number | undefined;
}

export function encodeSelection(type: typeof REQ_REDRIVE | typeof REQ_PURGE, id: number, selection: Selection): Uint8Array {
  const seqs = selection.seqs ?? [];
  const frame = newFrame(type, id, SELECTION_HEADER_BYTES + 8 * seqs.length);
  const at = FRAME_HEADER_BYTES;
  frame[at] = (selection.seqs === undefined ? 0 : SELECT_FLAG_SEQS) | (selection.limit === undefined ? 0 : SELECT_FLAG_LIMIT);
  writeU32(frame, at + 4, seqs.length);
  writeU64(frame, at + 8, selection.limit ?? 0);
  for (let i = 0; i < seqs.length; i++) writeU64(frame, at + SELECTION_HEADER_BYTES + 8 * i, seqs[i]!);
  return frame;
}

export type Request =
  | { readonly type: 'hello'; readonly id: number; readonly version: number }
  | {
      readonly type: 'push';
      readonly id: number;
      readonly payloads: Uint8Array[];
      readonly priority: number;
      readonly notBefore: number;
      readonly keys: string[] | undefined;
    }
  | { readonly type: 'cancel'; readonly id: number; readonly target: number }
  | { readonly type: 'stats' | 'compact' | 'timings'; readonly id: number }
  | { readonly type: 'deadLetters'; readonly id: number; readonly after: number; readonly limit: number }
  | { readonly type: 'groups'; readonly id: number; readonly limit: number }
  | { readonly type: 'schedules'; readonly id: number; readonly after: string; readonly limit: number }
  | { readonly type: 'redrive' | 'purge'; readonly id: number; readonly seqs: number[] | undefined; readonly limit: number | undefined };

const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });
/** A schedule name may start with U+FEFF: decoded as it is, not taken for a byte-order mark. */
const nameUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The request a frame from a client holds, every field checked (FORMAT.md §15.2). Push payloads are
 * views into the frame's body. Throws ProtocolError.
 */
export function decodeRequest(frame: Frame): Request {
  const { type, id, body } = frame;
  switch (type) {
    case REQ_HELLO: {
      if (readU32(body, 0) !== HELLO_MAGIC) throw new ProtocolError('a hello must start with the magic "PQEP"');
      if (readU16(body, 6) !== 0) throw new ProtocolError('the reserved field of a hello must be 0');
      return { type: 'hello', id, version: readU16(body, 4) };
    }
    case REQ_PUSH:
      return decodePush(id, body);
    case REQ_CANCEL:
      return { type: 'cancel', id, target: readU32(body, 0) };
    case REQ_STATS:
      return { type: 'stats', id };
    case REQ_COMPACT:
      return { type: 'compact', id };
    case REQ_TIMINGS:
      return { type: 'timings', id };
    case REQ_DEAD_LETTERS: {
      const after = readU64(body, 0);
      if (after < 0) throw new ProtocolError('the after field of a dead-letter list must be a safe integer');
      const limit = readU32(body, 8);
      if (limit === 0) throw new ProtocolError('the limit of a dead-letter list must be at least 1');
      return { type: 'deadLetters', id, after, limit };
    }
    case REQ_REDRIVE:
    case REQ_PURGE:
      return decodeSelection(type === REQ_REDRIVE ? 'redrive' : 'purge', id, body);
    case REQ_GROUPS: {
      const limit = readU32(body, 0);
      if (limit < 1 || limit > GROUPS_LIMIT_MAX)
        throw new ProtocolError(`the limit of a groups request must be 1 to ${GROUPS_LIMIT_MAX}, got ${limit}`);
      return { type: 'groups', id, limit };
    }
    case REQ_SCHEDULES:
      return decodeSchedules(id, body);
    default:
      throw new ProtocolError(`frame type 0x${type.toString(16)} is not a request`);
  }
}

function decodePush(id: number, body: Uint8Array): Request {
  const flags = body[0]!;
  if ((flags & ~PUSH_FLAG_KEYED) !== 0) throw new ProtocolError(`push flags 0x${flags.toString(16)} set bits this version does not define`);
  const keyed = (flags & PUSH_FLAG_KEYED) !== 0;
  const priority = (body[1]! << 24) >> 24; // i8
  if (priority < PRIORITY_MIN || priority > PRIORITY_MAX) throw new ProtocolError(`push priority ${priority} is out of range`);
  if (readU16(body, 2) !== 0) throw new ProtocolError('the reserved field of a push must be 0');
  const count = readU32(body, 4);
  const notBefore = readU64(body, 8);
  if (notBefore < 0) throw new ProtocolError('a push notBefore must be a safe integer');
  const perItem = ITEM_HEADER_BYTES + (keyed ? 2 : 0);
  // Bounded before the arrays are sized: every item takes at least its header (and a 1-byte key).
  if (count === 0 || count > (body.length - PUSH_HEADER_BYTES) / perItem) {
    throw new ProtocolError(`a push of ${body.length} bytes cannot hold ${count} items`);
  }
  const payloads: Uint8Array[] = new Array(count);
  const keys: string[] | undefined = keyed ? new Array(count) : undefined;
  let at = PUSH_HEADER_BYTES;
  for (let i = 0; i < count; i++) {
    if (body.length - at < ITEM_HEADER_BYTES) throw new ProtocolError(`push item ${i} runs past the end of the frame`);
    const length = readU32(body, at);
    at += ITEM_HEADER_BYTES;
    if (keys !== undefined) {
      if (at >= body.length) throw new ProtocolError(`push item ${i} runs past the end of the frame`);
      const keyBytes = body[at++]!;
      if (keyBytes === 0 || keyBytes > MAX_KEY_BYTES || keyBytes > body.length - at)
        throw new ProtocolError(`push item ${i} has a key of ${keyBytes} bytes`);
      let key: string;
      try {
        key = fatalUtf8.decode(body.subarray(at, at + keyBytes));
      } catch {
        throw new ProtocolError(`push item ${i} has a key that is not UTF-8`);
      }
      if (!isValidKey(key)) throw new ProtocolError(`push item ${i} has a key that is not a valid idempotency key`);
      keys[i] = key;
      at += keyBytes;
    }
    if (length > body.length - at) throw new ProtocolError(`push item ${i} has a payload of ${length} bytes, past the end of the frame`);
    payloads[i] = body.subarray(at, at + length);
    at += length;
  }
  if (at !== body.length) throw new ProtocolError(`a push frame has ${body.length - at} bytes after its last item`);
  return { type: 'push', id, payloads, priority, notBefore, keys };
}

function decodeSchedules(id: number, body: Uint8Array): Request {
  const limit = readU32(body, 0);
  if (limit < 1 || limit > SCHEDULES_LIMIT_MAX)
    throw new ProtocolError(`the limit of a schedules request must be 1 to ${SCHEDULES_LIMIT_MAX}, got ${limit}`);
  const afterBytes = body[4]!;
  if (body[5] !== 0 || body[6] !== 0 || body[7] !== 0) throw new ProtocolError('the reserved bytes of a schedules request must be 0');
  if (afterBytes > MAX_SCHEDULE_NAME_BYTES || body.length !== SCHEDULES_HEADER_BYTES + afterBytes)
    throw new ProtocolError(`a schedules request of ${body.length} bytes cannot hold a name of ${afterBytes} bytes`);
  let after: string;
  try {
    after = nameUtf8.decode(body.subarray(SCHEDULES_HEADER_BYTES));
  } catch {
    throw new ProtocolError('the name a schedules request lists after is not UTF-8');
  }
  return { type: 'schedules', id, after, limit };
}

function decodeSelection(type: 'redrive' | 'purge', id: number, body: Uint8Array): Request {
  const flags = body[0]!;
  if ((flags & ~(SELECT_FLAG_SEQS | SELECT_FLAG_LIMIT)) !== 0 || body[1] !== 0 || body[2] !== 0 || body[3] !== 0) {
    throw new ProtocolError(`a ${type} has flags or reserved bytes this version does not define`);
  }
  const count = readU32(body, 4);
  const limitField = readU64(body, 8);
  if (body.length !== SELECTION_HEADER_BYTES + 8 * count)
    throw new ProtocolError(`a ${type} of ${body.length} bytes cannot hold ${count} seqs`);
  let limit: number | undefined;
  if ((flags & SELECT_FLAG_LIMIT) !== 0) {
    if (limitField < 1) throw new ProtocolError(`the limit of a ${type} must be a positive safe integer`);
    limit = limitField;
  } else if (limitField !== 0) throw new ProtocolError(`a ${type} without a limit must have 0 in its limit field`);
  let seqs: number[] | undefined;
  if ((flags & SELECT_FLAG_SEQS) !== 0) {
    seqs = new Array(count);
    for (let i = 0; i < count; i++) {
      const seq = readU64(body, SELECTION_HEADER_BYTES + 8 * i);
      if (seq < 0) throw new ProtocolError(`seq ${i} of a ${type} is not a safe integer`);
      seqs[i] = seq;
    }
  } else if (count !== 0) throw new ProtocolError(`a ${type} without seqs must have a seq count of 0`);
  return { type, id, seqs, limit };
}

// ---- Replies ----

export function encodeHelloReply(id: number, maxItemBytes: number, version = PROTOCOL_VERSION): Uint8Array {
  const frame = newFrame(REP_HELLO, id, HELLO_REPLY_BYTES);
  writeU16(frame, FRAME_HEADER_BYTES, version);
  writeU32(frame, FRAME_HEADER_BYTES + 4, maxItemBytes);
  return frame;
}

export function encodeSeqs(id: number, seqs: readonly number[]): Uint8Array {
  const frame = newFrame(REP_SEQS, id, SEQS_HEADER_BYTES + 8 * seqs.length);
  writeU32(frame, FRAME_HEADER_BYTES, seqs.length);
  for (let i = 0; i < seqs.length; i++) writeU64(frame, FRAME_HEADER_BYTES + SEQS_HEADER_BYTES + 8 * i, seqs[i]!);
  return frame;
}

const utf8 = new TextEncoder();

/** A JSON value (the queue's figures, a compaction's result, a count), or null when it does not fit `maxBodyBytes`. */
export function encodeValue(id: number, value: unknown, maxBodyBytes: number): Uint8Array | null {
  const json = utf8.encode(JSON.stringify(value ?? null));
  if (json.length > maxBodyBytes) return null;
  const frame = newFrame(REP_VALUE, id, json.length);
  frame.set(json, FRAME_HEADER_BYTES);
  return frame;
}

export interface WireDeadLetter {
  readonly seq: number;
  readonly bytes: Uint8Array;
  readonly deliveries: number;
  readonly firstDeliveredAt: number;
  readonly lastDeliveredAt: number;
  readonly deadAt: number;
  readonly reason: string;
}

/**
 * The dead letters of `list` that fit a body of `maxBodyBytes`, in order, and at least the first
 * (whose payload is within maxItemBytes and whose reason within MAX_REASON_BYTES, so it always fits).
 */
export function encodeDeadLetterList(id: number, list: readonly WireDeadLetter[], maxBodyBytes: number): Uint8Array {
  const reasons: Uint8Array[] = [];
  let bodyBytes = DEAD_LETTERS_HEADER_BYTES;
  for (const d of list) {
    const reason = utf8.encode(d.reason).subarray(0, MAX_REASON_BYTES);
    const bytes = DEAD_LETTER_ENTRY_BYTES + reason.length + d.bytes.length;
    if (reasons.length > 0 && bodyBytes + bytes > maxBodyBytes) break;
    reasons.push(reason);
    bodyBytes += bytes;
  }
  const frame = newFrame(REP_DEAD_LETTERS, id, bodyBytes);
  writeU32(frame, FRAME_HEADER_BYTES, reasons.length);
  let at = FRAME_HEADER_BYTES + DEAD_LETTERS_HEADER_BYTES;
  for (let i = 0; i < reasons.length; i++) {
    const d = list[i]!;
    const reason = reasons[i]!;
    writeU64(frame, at, d.seq);
    writeU32(frame, at + 8, d.deliveries);
    writeU64(frame, at + 12, d.firstDeliveredAt);
    writeU64(frame, at + 20, d.lastDeliveredAt);
    writeU64(frame, at + 28, d.deadAt);
    writeU16(frame, at + 36, reason.length);
    writeU32(frame, at + 38, d.bytes.length);
    at += DEAD_LETTER_ENTRY_BYTES;
    frame.set(reason, at);
    at += reason.length;
    frame.set(d.bytes, at);
    at += d.bytes.length;
  }
  return frame;
}

/** The longest prefix of `text` whose UTF-8 is at most `max` bytes, cut between characters. */
function utf8Prefix(text: string, max: number): Uint8Array {
  const bytes = utf8.encode(text);
  if (bytes.length <= max) return bytes;
  let end = max;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end);
}

const CODE_RE = /^ERR_[A-Z0-9_]{1,28}$/;

/** The error reply that makes the client throw what `error` is (FORMAT.md §15.3). */
export function encodeError(id: number, error: unknown): Uint8Array {
  let kind = ERROR_KIND_OTHER;
  let code = '';
  const e = error as { name?: unknown; code?: unknown; message?: unknown } | null;
  if (error instanceof RangeError) kind = ERROR_KIND_RANGE;
  else if (error instanceof TypeError) kind = ERROR_KIND_TYPE;
  else if (e !== null && typeof e === 'object' && e.name === 'AbortError') kind = ERROR_KIND_ABORT;
  else if (error instanceof QueueError && CODE_RE.test(error.code)) {
    kind = ERROR_KIND_QUEUE;
    code = error.code;
  }
  const message = utf8Prefix(typeof e?.message === 'string' ? e.message : String(error), ERROR_MESSAGE_BYTES_MAX);
  const frame = newFrame(REP_ERROR, id, ERROR_HEADER_BYTES + code.length + message.length);
  let at = FRAME_HEADER_BYTES;
  frame[at] = kind;
  frame[at + 1] = code.length;
  writeU16(frame, at + 2, message.length);
  at += ERROR_HEADER_BYTES;
  for (let i = 0; i < code.length; i++) frame[at + i] = code.charCodeAt(i);
  frame.set(message, at + code.length);
  return frame;
}

export type Reply =
  | { readonly type: 'hello'; readonly id: number; readonly version: number; readonly maxItemBytes: number }
  | { readonly type: 'seqs'; readonly id: number; readonly seqs: number[] }
  | { readonly type: 'value'; readonly id: number; readonly value: unknown }
  | { readonly type: 'deadLetters'; readonly id: number; readonly list: WireDeadLetter[] }
  | { readonly type: 'error'; readonly id: number; readonly kind: number; readonly code: string; readonly message: string };

const lenientUtf8 = new TextDecoder();

/** The reply a frame from the owner holds, checked as a request is. Throws ProtocolError. */
export function decodeReply(frame: Frame): Reply {
  const { type, id, body } = frame;
  switch (type) {
    case REP_HELLO: {
      const maxItemBytes = readU32(body, 4);
      if (readU16(body, 2) !== 0 || maxItemBytes < 1 || maxItemBytes > MAX_PAYLOAD_BYTES_CAP)
        throw new ProtocolError(`a hello reply names maxItemBytes ${maxItemBytes}`);
      return { type: 'hello', id, version: readU16(body, 0), maxItemBytes };
    }
    case REP_SEQS: {
      const count = readU32(body, 0);
      if (body.length !== SEQS_HEADER_BYTES + 8 * count)
        throw new ProtocolError(`a seqs reply of ${body.length} bytes cannot hold ${count} seqs`);
      const seqs: number[] = new Array(count);
      for (let i = 0; i < count; i++) {
        const seq = readU64(body, SEQS_HEADER_BYTES + 8 * i);
        if (seq < 1) throw new ProtocolError(`seq ${i} of a reply is not a positive safe integer`);
        seqs[i] = seq;
      }
      return { type: 'seqs', id, seqs };
    }
    case REP_VALUE: {
      try {
        return { type: 'value', id, value: JSON.parse(fatalUtf8.decode(body)) as unknown };
      } catch {
        throw new ProtocolError('a value reply is not UTF-8 JSON');
      }
    }
    case REP_DEAD_LETTERS:
      return decodeDeadLetterList(id, body);
    case REP_ERROR: {
      const kind = body[0]!;
      const codeBytes = body[1]!;
      const messageBytes = readU16(body, 2);
      if (kind > ERROR_KIND_OTHER || codeBytes > ERROR_CODE_BYTES_MAX || body.length !== ERROR_HEADER_BYTES + codeBytes + messageBytes) {
        throw new ProtocolError('an error reply does not add up');
      }
      const code = String.fromCharCode(...body.subarray(ERROR_HEADER_BYTES, ERROR_HEADER_BYTES + codeBytes));
      if ((kind === ERROR_KIND_QUEUE) !== CODE_RE.test(code) || (kind !== ERROR_KIND_QUEUE && codeBytes !== 0))
        throw new ProtocolError(`an error reply has the code ${JSON.stringify(code)} with kind ${kind}`);
      return { type: 'error', id, kind, code, message: lenientUtf8.decode(body.subarray(ERROR_HEADER_BYTES + codeBytes)) };
    }
    default:
      throw new ProtocolError(`frame type 0x${type.toString(16)} is not a reply`);
  }
}

function decodeDeadLetterList(id: number, body: Uint8Array): Reply {
  const count = readU32(body, 0);
  if (count > (body.length - DEAD_LETTERS_HEADER_BYTES) / DEAD_LETTER_ENTRY_BYTES)
    throw new ProtocolError(`a dead-letter reply of ${body.length} bytes cannot hold ${count} entries`);
  const list: WireDeadLetter[] = [];
  let at = DEAD_LETTERS_HEADER_BYTES;
  for (let i = 0; i < count; i++) {
    if (body.length - at < DEAD_LETTER_ENTRY_BYTES) throw new ProtocolError(`dead letter ${i} runs past the end of the frame`);
    const seq = readU64(body, at);
    const deliveries = readU32(body, at + 8);
    const firstDeliveredAt = readU64(body, at + 12);
    const lastDeliveredAt = readU64(body, at + 20);
    const deadAt = readU64(body, at + 28);
    const reasonBytes = readU16(body, at + 36);
    const payloadBytes = readU32(body, at + 38);
    at += DEAD_LETTER_ENTRY_BYTES;
    if (seq < 1 || firstDeliveredAt < 0 || lastDeliveredAt < 0 || deadAt < 0 || reasonBytes > MAX_REASON_BYTES)
      throw new ProtocolError(`dead letter ${i} has a field out of range`);
    if (reasonBytes + payloadBytes > body.length - at) throw new ProtocolError(`dead letter ${i} runs past the end of the frame`);
    const reason = lenientUtf8.decode(body.subarray(at, at + reasonBytes));
    at += reasonBytes;
    list.push({ seq, deliveries, firstDeliveredAt, lastDeliveredAt, deadAt, reason, bytes: body.slice(at, at + payloadBytes) });
    at += payloadBytes;
  }
  if (at !== body.length) throw new ProtocolError(`a dead-letter reply has ${body.length - at} bytes after its last entry`);
  return { type: 'deadLetters', id, list };
}
