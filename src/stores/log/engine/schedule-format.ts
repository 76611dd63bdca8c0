// Implements FORMAT.md §4.1 (the schedule section of a version-5 checkpoint) and §4.2 (SCHEDULE and UNSCHEDULE records).
/**
 * A schedule entry is `firedThrough u64, nextAt u64, nameBytes u8, specBytes u16, payloadBytes
 * u32`, then the name and the spec in UTF-8 and the payload: one schedule as the Store contract
 * holds it (`StoredSchedule`). A SCHEDULE record holds one entry, an UNSCHEDULE record a name. Every
 * decoder checks each length against the end of the bytes it was given before it reads past it,
 * and returns null for anything a writer never writes.
 */
import type { StoredSchedule } from '../../../contract/store.js';
import {
  MAX_PAYLOAD_BYTES_CAP,
  MAX_SCHEDULE_NAME_BYTES_ON_DISK,
  MAX_SCHEDULE_SPEC_BYTES_ON_DISK,
  RECORD_SCHEDULE,
  RECORD_UNSCHEDULE,
  SCHEDULE_ENTRY_FIXED_BYTES,
  readU16,
  readU32,
  readU64,
  writeU16,
  writeU32,
  writeU64,
} from './format.js';

const encoder = new TextEncoder();
/** Fatal: text that is not valid UTF-8 is damage, never a name read back different from the one stored. */
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** A schedule with its name and spec already encoded. */
export interface EncodedSchedule {
  readonly schedule: StoredSchedule;
  readonly name: Uint8Array;
  readonly spec: Uint8Array;
}

/** Encode `schedule`; throws on one no entry can hold (an invariant the store checked when it was stored). */
export function encodeSchedule(schedule: StoredSchedule): EncodedSchedule {
  const name = encoder.encode(schedule.name);
  const spec = encoder.encode(schedule.spec);
  if (
    name.length === 0 ||
    name.length > MAX_SCHEDULE_NAME_BYTES_ON_DISK ||
    spec.length > MAX_SCHEDULE_SPEC_BYTES_ON_DISK ||
    schedule.bytes.length > MAX_PAYLOAD_BYTES_CAP
  ) {
    throw new Error(`refusing to write an inconsistent cursor: schedule ${JSON.stringify(schedule.name)} does not fit an entry`);
  }
  return { schedule, name, spec };
}

export function scheduleEntryBytes(e: EncodedSchedule): number {
  return SCHEDULE_ENTRY_FIXED_BYTES + e.name.length + e.spec.length + e.schedule.bytes.length;
}

/** Write the entry at `buf[at..]`; returns the offset past it. */
export function writeScheduleEntry(buf: Uint8Array, at: number, e: EncodedSchedule): number {
  writeU64(buf, at, e.schedule.firedThrough);
  writeU64(buf, at + 8, e.schedule.nextAt);
  buf[at + 16] = e.name.length;
  writeU16(buf, at + 17, e.spec.length);
  writeU32(buf, at + 19, e.schedule.bytes.length);
  let p = at + SCHEDULE_ENTRY_FIXED_BYTES;
  buf.set(e.name, p);
  p += e.name.length;
  buf.set(e.spec, p);
  p += e.spec.length;
  buf.set(e.schedule.bytes, p);
  return p + e.schedule.bytes.length;
}

function text(buf: Uint8Array, at: number, length: number): string | null {
  try {
    return decoder.decode(buf.subarray(at, at + length));
  } catch {
    return null;
  }
}

/** The entry at `buf[at..end)`, and the offset past it; null when it is malformed or runs past `end`. */
export function readScheduleEntry(buf: Uint8Array, at: number, end: number): { value: StoredSchedule; next: number } | null {
  if (at + SCHEDULE_ENTRY_FIXED_BYTES > end) return null;
  const firedThrough = readU64(buf, at);
  const nextAt = readU64(buf, at + 8);
  const nameBytes = buf[at + 16]!;
  const specBytes = readU16(buf, at + 17);
  const payloadBytes = readU32(buf, at + 19);
  if (
    firedThrough < 0 ||
    nextAt < 0 ||
    nameBytes === 0 ||
    nameBytes > MAX_SCHEDULE_NAME_BYTES_ON_DISK ||
    specBytes > MAX_SCHEDULE_SPEC_BYTES_ON_DISK ||
    payloadBytes > MAX_PAYLOAD_BYTES_CAP
  )
    return null;
  let p = at + SCHEDULE_ENTRY_FIXED_BYTES;
  if (p + nameBytes + specBytes + payloadBytes > end) return null;
  const name = text(buf, p, nameBytes);
  p += nameBytes;
  const spec = text(buf, p, specBytes);
  p += specBytes;
  if (name === null || spec === null) return null;
  // A copy: the schedule outlives the read buffer (it is held in memory until it is replaced).
  const bytes = buf.slice(p, p + payloadBytes);
  return { value: { name, spec, bytes, firedThrough, nextAt }, next: p + payloadBytes };
}

/**
 * Read `count` entries filling `buf[at .. end)` exactly, names strictly increasing (as the
 * checkpoint writes them). Returns the schedules, or the offset and reason of the first bad entry.
 */
export function readSchedules(
  buf: Uint8Array,
  at: number,
  end: number,
  count: number,
): StoredSchedule[] | { offset: number; reason: string } {
  const out: StoredSchedule[] = [];
  let p = at;
  for (let i = 0; i < count; i++) {
    const e = readScheduleEntry(buf, p, end);
    if (e === null || (i > 0 && !(out[i - 1]!.name < e.value.name)))
      return { offset: p, reason: `schedule entry ${i} is malformed or out of order` };
    out.push(e.value);
    p = e.next;
  }
  if (p !== end) return { offset: p, reason: 'schedule section size does not match its entries' };
  return out;
}

/** A record of the schedules: one stored, or one deleted. */
export type ScheduleRecord =
  | { readonly type: typeof RECORD_SCHEDULE; readonly schedule: StoredSchedule }
  | { readonly type: typeof RECORD_UNSCHEDULE; readonly name: string };

export function isScheduleRecordType(type: number): boolean {
  return type === RECORD_SCHEDULE || type === RECORD_UNSCHEDULE;
}

/** The payload of a SCHEDULE record. */
export function schedulePayload(schedule: StoredSchedule): Uint8Array {
  const e = encodeSchedule(schedule);
  const buf = new Uint8Array(scheduleEntryBytes(e));
  writeScheduleEntry(buf, 0, e);
  return buf;
}

/** The payload of an UNSCHEDULE record: nameBytes u8, then the name. */
export function unschedulePayload(name: string): Uint8Array {
  const bytes = encoder.encode(name);
  if (bytes.length === 0 || bytes.length > MAX_SCHEDULE_NAME_BYTES_ON_DISK)
    throw new Error(`refusing to write an inconsistent cursor: schedule name ${JSON.stringify(name)} does not fit a record`);
  const buf = new Uint8Array(1 + bytes.length);
  buf[0] = bytes.length;
  buf.set(bytes, 1);
  return buf;
}

/** Decode a SCHEDULE or UNSCHEDULE record's payload `buf[at .. at + length)`; null when malformed. */
export function decodeScheduleRecord(type: number, buf: Uint8Array, at: number, length: number): ScheduleRecord | null {
  const end = at + length;
  if (type === RECORD_SCHEDULE) {
    const e = readScheduleEntry(buf, at, end);
    return e === null || e.next !== end ? null : { type: RECORD_SCHEDULE, schedule: e.value };
  }
  if (type !== RECORD_UNSCHEDULE || length < 2) return null;
  const n = buf[at]!;
  if (n === 0 || n > MAX_SCHEDULE_NAME_BYTES_ON_DISK || 1 + n !== length) return null;
  const name = text(buf, at + 1, n);
  return name === null ? null : { type: RECORD_UNSCHEDULE, name };
}
