// Writes FORMAT.md §4.2 (MARK, DEAD, DROP and REDRIVE records) and §4.5 (the upgrade to cursor version 2).
/**
 * Delivery counts and the dead-letter queue of a LogStore (the Store contract's
 * `features.deliveries`). Everything lives in the cursor file: the state in memory is the cursor
 * log's `deliveries`, each call writes records after the checkpoint, and a checkpoint carries the
 * whole state. A store that never calls these keeps a version-1 cursor; the first record that
 * needs version 2 is preceded by a version-2 checkpoint (an atomic replace, FORMAT §4.4), so a
 * version-1 reader meets a version it refuses (ERR_UNSUPPORTED_VERSION) before any new record.
 */
import type { DeadLetter, DeadLetterRange, DeliveryMark, Redrive, StoredItem } from '../../../contract/store.js';
import { type StoreInvariantError, invariantError } from './assert.js';
import type { CursorLog } from './cursor-log.js';
import {
  deadPayloads,
  dropPayloads,
  markPayloads,
  redrivePayloads,
  utf8,
  type EncodedDead,
  type EncodedMark,
  type RecordPayload,
} from './delivery-format.js';
import type { Durability } from './durability.js';
import { CURSOR_VERSION_DELIVERIES, MAX_REASON_BYTES_ON_DISK } from './format.js';

export interface DeliveryDeps {
  readonly cursor: CursorLog;
  readonly durability: Durability;
  readonly maxItemBytes: number;
  /** The seq the next appended item gets. */
  readonly nextSeq: () => number;
  /** Write a checkpoint of `version` now (the caller holds the cursor lane). */
  readonly checkpoint: (version: number) => Promise<unknown>;
  /** Store items as `append` does; called with the cursor lane held. */
  readonly append: (items: readonly StoredItem[], sync: boolean) => Promise<void>;
  /** Records were written: maintenance may have work (a long cursor log, acked segments). */
  readonly written: () => void;
}

function bad(what: string): StoreInvariantError {
  return invariantError(what);
}

function isTime(n: unknown): n is number {
  return Number.isSafeInteger(n) && (n as number) >= 0;
}

/** The UTF-8 bytes of a reason or error text, or null when it is not a string within the bound. */
function reasonBytes(text: unknown): Uint8Array | null {
  if (typeof text !== 'string') return null;
  const bytes = utf8(text);
  return bytes.length <= MAX_REASON_BYTES_ON_DISK ? bytes : null;
}

export class Deliveries {
  constructor(private readonly d: DeliveryDeps) {}

  /** `seq` was appended and is neither acked nor a dead letter. */
  #held(seq: unknown): seq is number {
    return (
      Number.isSafeInteger(seq) && (seq as number) >= 1 && (seq as number) < this.d.nextSeq() && !this.d.cursor.acks.has(seq as number)
    );
  }

  markDelivered(below: number, marks: readonly DeliveryMark[], sync: boolean): void | Promise<void> {
    const { cursor, durability } = this.d;
    if (!Number.isSafeInteger(below) || below < 1 || !Array.isArray(marks))
      return durability.fail(bad(`markDelivered(${String(below)}) with a bad bound or marks`));
    // A bound alone, unsynced, on a version-2 cursor no checkpoint is replacing: what a first
    // delivery writes, with nothing made for it.
    if (marks.length === 0 && !sync && cursor.version >= CURSOR_VERSION_DELIVERIES && cursor.free) {
      const rejected = cursor.writeBound(below);
      if (rejected !== null) return rejected;
      cursor.deliveries.deliveredBelow = below;
      this.d.written();
      return undefined;
    }
    const encoded: EncodedMark[] = [];
    const seen = new Set<number>();
    for (const m of marks) {
      const error = reasonBytes(m?.lastError);
      const ok =
        this.#held(m?.seq) &&
        !seen.has(m.seq) &&
        Number.isSafeInteger(m.deliveries) &&
        m.deliveries >= 1 &&
        isTime(m.firstDeliveredAt) &&
        isTime(m.lastDeliveredAt) &&
        error !== null;
      if (!ok) return durability.fail(bad(`delivery mark of seq ${String(m?.seq)} is not for a held item or has bad fields`));
      seen.add(m.seq);
      const mark: DeliveryMark = {
        seq: m.seq,
        deliveries: m.deliveries,
        firstDeliveredAt: m.firstDeliveredAt,
        lastDeliveredAt: m.lastDeliveredAt,
        lastError: m.lastError,
      };
      encoded.push({ mark, error });
    }
    // Any call, even one whose bound changes nothing, moves a version-1 cursor to version 2: a queue
    // keeping delivery counts makes one at open, so that the records of its first deliveries are
    // written within the call (an upgrade is a checkpoint: a file replaced, and waited for). A
    // store never asked for delivery records keeps writing version 1.
    const payloads = markPayloads(below, encoded);
    const apply = () =>
      cursor.deliveries.mark(
        below,
        encoded.map((e) => e.mark),
      );
    // Unsynced, on a version-2 cursor no checkpoint is replacing: written now, nothing to wait for.
    if (!sync && cursor.version >= CURSOR_VERSION_DELIVERIES && cursor.free) {
      const rejected = cursor.writeRecords(payloads, 'delivery mark');
      if (rejected !== null) return rejected;
      apply();
      this.d.written();
      return undefined;
    }
    return this.#store(payloads, 'delivery mark', sync, apply);
  }

  deadLetter(entries: readonly DeadLetter[]): Promise<void> {
    const { cursor, durability } = this.d;
    if (!Array.isArray(entries) || entries.length === 0) return durability.fail(bad('deadLetter with no entries'));
    const encoded: EncodedDead[] = [];
    const seen = new Set<number>();
    for (const e of entries) {
      const reason = reasonBytes(e?.reason);
      const ok =
        this.#held(e?.seq) &&
        !seen.has(e.seq) &&
        e.bytes instanceof Uint8Array &&
        e.bytes.length <= this.d.maxItemBytes &&
        Number.isSafeInteger(e.deliveries) &&
        e.deliveries >= 0 &&
        isTime(e.firstDeliveredAt) &&
        isTime(e.lastDeliveredAt) &&
        isTime(e.deadAt) &&
        reason !== null;
      if (!ok) return durability.fail(bad(`dead letter of seq ${String(e?.seq)} is not for a held item or has bad fields`));
      seen.add(e.seq);
      const dead: DeadLetter = {
        seq: e.seq,
        bytes: e.bytes,
        deliveries: e.deliveries,
        firstDeliveredAt: e.firstDeliveredAt,
        lastDeliveredAt: e.lastDeliveredAt,
        deadAt: e.deadAt,
        reason: e.reason,
      };
      encoded.push({ dead, reason });
    }
    encoded.sort((a, b) => a.dead.seq - b.dead.seq);
    // Durable when it resolves whatever the policy: a dead letter that came back into the queue
    // after a crash could be delivered (and fail) once more than the limit allows.
    return this.#store(deadPayloads(encoded), 'dead letter', true, () => {
      for (const { dead } of encoded) cursor.acks.add(dead.seq, dead.seq + 1);
      cursor.deliveries.addDead(encoded.map((e) => e.dead));
    });
  }

  readDeadLetters(range: DeadLetterRange): readonly DeadLetter[] {
    const failure = this.d.durability.failure;
    if (failure !== null) throw failure;
    const after = range?.after;
    const limit = range?.limit;
    if (!Number.isSafeInteger(after) || after < 0 || !Number.isSafeInteger(limit) || limit < 1) {
      throw this.d.durability.markFailed(bad(`readDeadLetters(${String(after)}, ${String(limit)})`));
    }
    return this.d.cursor.deliveries.readDead(after, limit);
  }

  dropDeadLetters(seqs: readonly number[], sync: boolean): Promise<void> {
    const { cursor, durability } = this.d;
    if (!Array.isArray(seqs) || seqs.length === 0) return durability.fail(bad('dropDeadLetters with no seqs'));
    const sorted = [...seqs].sort((a, b) => a - b);
    for (let i = 0; i < sorted.length; i++) {
      if (!cursor.deliveries.holdsDead(sorted[i]!) || (i > 0 && sorted[i] === sorted[i - 1]))
        return durability.fail(bad(`seq ${sorted[i]} is not a held dead letter`));
    }
    return this.#store(dropPayloads(sorted), 'dead-letter drop', sync, () => cursor.deliveries.dropDead(sorted));
  }

  /**
   * The REDRIVE records first, made durable, then the items, as `append` stores them, with the
   * lane held throughout so that no checkpoint runs in between (it would drop the records while
   * the items may not be durable yet). Recovery judges each move by whether its new seq is below
   * the recovered next seq: done, or never happened. A failure once the records are written fails
   * the instance: the records must not outlive the items they promise (a later item given the same
   * seq would make the move look done), and only the next open can judge them.
   */
  redrive(moves: readonly Redrive[], sync: boolean): Promise<void> {
    const { cursor, durability } = this.d;
    if (!Array.isArray(moves) || moves.length === 0) return durability.fail(bad('redrive with no moves'));
    const seen = new Set<number>();
    let expect = this.d.nextSeq();
    for (const m of moves) {
      const ok =
        cursor.deliveries.holdsDead(m?.from) &&
        !seen.has(m.from) &&
        m.item?.seq === expect &&
        m.item.bytes instanceof Uint8Array &&
        m.item.bytes.length <= this.d.maxItemBytes;
      if (!ok)
        return durability.fail(
          bad(
            `redrive of ${String(m?.from)} to seq ${String(m?.item?.seq)} (expected ${expect}): not a held dead letter or not the next seq`,
          ),
        );
      seen.add(m.from);
      expect++;
    }
    const records = redrivePayloads(moves.map((m) => ({ from: m.from, seq: m.item.seq })));
    const items = moves.map((m) => m.item);
    return cursor.withLane(async () => {
      await this.#upgrade();
      const rejected = cursor.writeRecords(records, 'redrive');
      if (rejected !== null) return rejected;
      this.d.written();
      await cursor.sync();
      if (durability.failure !== null) throw durability.failure;
      try {
        await this.d.append(items, sync);
      } catch (e) {
        throw durability.markFailed(e);
      }
      cursor.deliveries.dropDead(seen);
    });
  }

  /**
   * Write `records` once no checkpoint runs (after upgrading a version-1 cursor, with the lane
   * held), then change the state in memory and sync when asked. A failed write changes nothing.
   */
  #store(records: RecordPayload[], what: string, sync: boolean, apply: () => void): Promise<void> {
    const { cursor } = this.d;
    const write = (): Promise<void> => {
      const rejected = cursor.writeRecords(records, what);
      if (rejected !== null) return rejected;
      apply();
      this.d.written();
      return sync ? cursor.sync() : Promise.resolve();
    };
    if (cursor.version >= CURSOR_VERSION_DELIVERIES) return cursor.whenFree(write);
    return cursor.withLane(async () => {
      await this.#upgrade();
      return write();
    });
  }

  /** Replace a version-1 cursor by a version-2 checkpoint of the same state (the lane is held). */
  async #upgrade(): Promise<void> {
    if (this.d.cursor.version >= CURSOR_VERSION_DELIVERIES) return;
    await this.d.checkpoint(CURSOR_VERSION_DELIVERIES);
  }
}
