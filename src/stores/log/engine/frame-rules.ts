// Implements the content rules of FORMAT.md §3.1–§3.2 (segment records) and §4.2 (cursor records).
/**
 * What makes a CRC-valid frame acceptable at its place in a file, for each kind of file. These are
 * the only definitions of frame validity: the consumer reader, compaction, recovery and `verify`
 * all judge frames with them through `FrameReader`.
 */
import type { FrameRules } from './frame-reader.js';
import { decodeDeliveryRecord, isDeliveryRecordType, type DeliveryRecord } from './delivery-format.js';
import { decodeScheduleRecord, isScheduleRecordType, type ScheduleRecord } from './schedule-format.js';
import {
  CURSOR_VERSION_DELIVERIES,
  CURSOR_VERSION_SCHEDULES,
  FRAME_HEADER_BYTES,
  MAX_CURSOR_RECORD_BYTES,
  MAX_PAYLOAD_BYTES_CAP,
  RANGE_BYTES,
  RECORD_ACK,
  RECORD_ITEM,
  RECORD_OPENED,
  RECORD_SEAL,
  SEAL_PAYLOAD_BYTES,
  SEGMENT_VERSION_PLAIN,
  SEGMENT_VERSION_SCHEDULED,
  readU64,
} from './format.js';
import { decodeItemMeta, decodedSegmentVersion, type ItemSchedule } from './item-meta.js';
import { frameBytes, payloadOffset, type FrameHeader } from './frame.js';
import { decodeSealPayload, type SealInfo } from './segment.js';

function sameSeal(a: SealInfo, b: SealInfo): boolean {
  return a.recordCount === b.recordCount && a.firstSeq === b.firstSeq && a.lastSeq === b.lastSeq && a.endSeq === b.endSeq;
}

/**
 * The frames of one segment, read from its first record: ITEM records with increasing seqs not
 * below the base, then at most one SEAL whose fields match the records before it (and, when the
 * seal is already known from the segment's last bytes or from this session, equal it), and nothing
 * after the SEAL. Counts what it accepted.
 */
export class SegmentFrames implements FrameRules {
  readonly maxPayloadBytes = MAX_PAYLOAD_BYTES_CAP;
  records = 0;
  firstSeq = 0;
  lastSeq = 0;
  seal: SealInfo | null = null;
  /** End of the last ITEM with a seq below `durableNextSeq` (0 when none). */
  durableEnd = 0;
  /** The lowest segment version that holds every accepted ITEM record (1 while they are plain). */
  need = SEGMENT_VERSION_PLAIN;
  /**
   * The priority, not-before time, key and group of the ITEM frame `contentOk` last accepted (0,
   * 0, none and none for a plain one, and in a version-1 segment, whose readers skip the metadata
   * area).
   */
  readonly schedule: ItemSchedule = { priority: 0, notBefore: 0, key: undefined, keyedAt: 0, group: undefined };
  /** Damage was skipped in this segment: the records accepted are not all it held. */
  private skippedDamage = false;

  constructor(
    readonly base: number,
    /** A COMPACTED segment has gaps between its seqs. */
    readonly compacted: boolean,
    /** The header's format version: version 2 gives ITEM metadata a meaning, version 3 its keys too (FORMAT §3.1). */
    readonly version: number,
    /** The seal this segment must end with, when known (the reader updates it once a roll seals the segment). */
    public expectedSeal: SealInfo | null = null,
    /** Records with a seq below this are known durable (recovery's checkpoint `nextSeq`). */
    readonly durableNextSeq = 0,
  ) {}

  contentOk(h: FrameHeader, buf: Uint8Array, at: number): boolean {
    if (this.seal !== null) return false; // nothing may follow a seal
    if (h.seq <= this.lastSeq || h.seq < this.base) return false;
    if (h.type === RECORD_ITEM) {
      if (h.metaBytes === 0 || this.version < SEGMENT_VERSION_SCHEDULED) {
        this.schedule.priority = 0;
        this.schedule.notBefore = 0;
        this.schedule.key = undefined;
        this.schedule.keyedAt = 0;
        this.schedule.spool = undefined;
        this.schedule.group = undefined;
        this.schedule.fired = undefined;
        return true;
      }
      return decodeItemMeta(buf, at + FRAME_HEADER_BYTES, h.metaBytes, this.schedule, this.version);
    }
    if (h.type !== RECORD_SEAL || h.length !== SEAL_PAYLOAD_BYTES || h.metaBytes !== 0) return false;
    const s = decodeSealPayload(buf, payloadOffset(at, h), h.seq);
    if (s === null) return false;
    if (!(this.skippedDamage ? this.sealCoversWhatRemains(s) : this.sealMatchesRecords(s))) return false;
    return this.expectedSeal === null || sameSeal(s, this.expectedSeal);
  }

  private sealMatchesRecords(s: SealInfo): boolean {
    const counted = this.records > 0;
    return s.recordCount === this.records && s.firstSeq === (counted ? this.firstSeq : 0) && s.lastSeq === (counted ? this.lastSeq : 0);
  }

  /** After damage was skipped, the seal counts the records lost in it too: it can only cover more. */
  private sealCoversWhatRemains(s: SealInfo): boolean {
    if (this.records === 0) return true;
    return s.recordCount >= this.records && s.firstSeq <= this.firstSeq && s.lastSeq >= this.lastSeq;
  }

  /**
   * `verify` and salvage go on after damage (`FrameReader.resync`): from then on the records
   * accepted are not all the segment held, so a SEAL is checked against the seal known from the
   * segment's last bytes (when there is one) and for covering what was accepted, not for matching
   * it exactly. Readers that stop at damage never call this.
   */
  skipDamage(): void {
    this.skippedDamage = true;
  }

  /** Whether a torn tail at the current position would lose records known durable (`durableNextSeq`). */
  get tornLosesDurable(): boolean {
    return Math.max(this.base, this.lastSeq + 1) < this.durableNextSeq;
  }

  plausible(h: FrameHeader, skippedBytes: number): boolean {
    if (!((h.type === RECORD_ITEM || h.type === RECORD_SEAL) && h.seq > this.lastSeq && h.seq >= this.base)) return false;
    // Seqs of a plain segment are consecutive and every frame takes at least a header, so the
    // next valid ITEM lies at most one seq per header skipped ahead. (A COMPACTED segment, with
    // gaps, is never written in place: damage in it is corruption whatever the search says.)
    return (
      this.compacted ||
      h.type !== RECORD_ITEM ||
      h.seq <= Math.max(this.base, this.lastSeq + 1) + Math.floor(skippedBytes / FRAME_HEADER_BYTES)
    );
  }

  accept(h: FrameHeader, buf: Uint8Array, at: number, offset: number): void {
    if (h.type === RECORD_SEAL) {
      this.seal = decodeSealPayload(buf, payloadOffset(at, h), h.seq);
      return;
    }
    if (h.seq < this.durableNextSeq) this.durableEnd = offset + frameBytes(h);
    const need = decodedSegmentVersion(this.schedule);
    if (need > this.need) this.need = need;
    if (this.records === 0) this.firstSeq = h.seq;
    this.lastSeq = h.seq;
    this.records++;
  }
}

/** The reason given when a sealed segment's data ends before its SEAL record. */
export const MISSING_SEAL = 'sealed segment ends without a seal record';

/**
 * The record log of the cursor file after its checkpoint: ACK records (well-formed ranges) and
 * OPENED records, numbered 1, 2, 3...; after a version-2 checkpoint also MARK, DEAD, DROP and
 * REDRIVE records, after a version-5 one SCHEDULE and UNSCHEDULE records too (FORMAT §4.2).
 * Collects the acked ranges through `onRange` (a DEAD record acks its seqs too), the delivery
 * records through `onDelivery` and the schedule records through `onSchedule`.
 */
export class CursorFrames implements FrameRules {
  readonly maxPayloadBytes: number;
  /** Number of the last accepted record (0 when none). */
  lastRecord = 0;
  /** Highest end of an accepted ACK range (or dead-lettered seq + 1). */
  maxAckEnd = 0;
  /** Whether any record was accepted (a CLEAN checkpoint followed by records was reopened since). */
  sawRecord = false;
  readonly #ackBound: number;
  readonly #deliveries: boolean;
  readonly #schedules: boolean;
  /** The delivery record `contentOk` decoded, handed to `accept`. */
  #decoded: DeliveryRecord | null = null;
  /** The schedule record `contentOk` decoded, handed to `accept`. */
  #schedule: ScheduleRecord | null = null;

  constructor(
    maxRangesPerRecord: number,
    private readonly onRange: (start: number, end: number) => void,
    /** The checkpoint's version: only version 2 may be followed by delivery records. */
    version = 1,
    private readonly onDelivery: (record: DeliveryRecord) => void = () => undefined,
    private readonly onSchedule: (record: ScheduleRecord) => void = () => undefined,
  ) {
    this.#ackBound = maxRangesPerRecord * RANGE_BYTES;
    this.#deliveries = version >= CURSOR_VERSION_DELIVERIES;
    this.#schedules = version >= CURSOR_VERSION_SCHEDULES;
    this.maxPayloadBytes = this.#deliveries ? MAX_CURSOR_RECORD_BYTES : this.#ackBound;
  }

  /** ACK payloads keep their own bound (a longer one is a bad length, as in version 1). */
  payloadBound(type: number): number {
    return type === RECORD_ACK ? this.#ackBound : this.maxPayloadBytes;
  }

  contentOk(h: FrameHeader, buf: Uint8Array, at: number): boolean {
    this.#decoded = null;
    this.#schedule = null;
    if (h.seq !== this.lastRecord + 1 || h.metaBytes !== 0) return false;
    if (h.type === RECORD_OPENED) return h.length === 0;
    if (this.#deliveries && isDeliveryRecordType(h.type)) {
      this.#decoded = decodeDeliveryRecord(h.type, buf, payloadOffset(at, h), h.length);
      return this.#decoded !== null;
    }
    if (this.#schedules && isScheduleRecordType(h.type)) {
      this.#schedule = decodeScheduleRecord(h.type, buf, payloadOffset(at, h), h.length);
      return this.#schedule !== null;
    }
    if (h.type !== RECORD_ACK || h.length === 0 || h.length % RANGE_BYTES !== 0) return false;
    const p0 = payloadOffset(at, h);
    for (let p = p0; p < p0 + h.length; p += RANGE_BYTES) {
      const s = readU64(buf, p);
      const e = readU64(buf, p + 8);
      if (s < 1 || e <= s) return false;
    }
    return true;
  }

  plausible(h: FrameHeader, skippedBytes: number): boolean {
    // Record numbers are consecutive and every record takes at least a header.
    return (
      (h.type === RECORD_ACK ||
        h.type === RECORD_OPENED ||
        (this.#deliveries && isDeliveryRecordType(h.type)) ||
        (this.#schedules && isScheduleRecordType(h.type))) &&
      h.seq > this.lastRecord &&
      h.seq <= this.lastRecord + 1 + Math.floor(skippedBytes / FRAME_HEADER_BYTES)
    );
  }

  accept(h: FrameHeader, buf: Uint8Array, at: number): void {
    this.lastRecord = h.seq;
    this.sawRecord = true;
    if (h.type === RECORD_OPENED) return;
    const schedule = this.#schedule;
    if (schedule !== null) {
      this.#schedule = null;
      this.onSchedule(schedule);
      return;
    }
    const record = this.#decoded;
    this.#decoded = null;
    if (record !== null) {
      if ('dead' in record) {
        for (const d of record.dead) {
          this.onRange(d.seq, d.seq + 1);
          if (d.seq + 1 > this.maxAckEnd) this.maxAckEnd = d.seq + 1;
        }
      }
      this.onDelivery(record);
      return;
    }
    const p0 = payloadOffset(at, h);
    for (let p = p0; p < p0 + h.length; p += RANGE_BYTES) {
      const s = readU64(buf, p);
      const e = readU64(buf, p + 8);
      this.onRange(s, e);
      if (e > this.maxAckEnd) this.maxAckEnd = e;
    }
  }
}
