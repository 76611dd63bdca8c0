/**
 * Checks of the delivery marks and dead letters the core hands to a durable store, shared by
 * SqliteStore and LevelStore so that both refuse the same contract violations. Each check returns
 * what is wrong, or undefined; the store rejects the whole call with `ERR_STORE` before it writes.
 */
import { type DeadLetter, type DeliveryMark, MAX_REASON_BYTES } from '../store.js';

/** A count or a time in ms: stored as an unsigned integer, so it must be one. */
function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function isReason(value: unknown): value is string {
  return typeof value === 'string' && Buffer.byteLength(value, 'utf8') <= MAX_REASON_BYTES;
}

/** What is wrong with `mark`, or undefined. Whether its seq is held is the store's check. */
export function markFault(mark: DeliveryMark): string | undefined {
  if (!isCount(mark.seq) || mark.seq < 1) return `a delivery mark has seq ${String(mark.seq)}`;
  if (!isCount(mark.deliveries) || mark.deliveries < 1) return `the mark of seq ${mark.seq} has ${String(mark.deliveries)} deliveries`;
  if (!isCount(mark.firstDeliveredAt) || !isCount(mark.lastDeliveredAt))
    return `the mark of seq ${mark.seq} has a time that is not a non-negative integer`;
  if (!isReason(mark.lastError))
    return `the mark of seq ${mark.seq} has a lastError that is not a string of at most ${MAX_REASON_BYTES} UTF-8 bytes`;
  return undefined;
}

/** What is wrong with `entry`, or undefined. Whether its seq is held is the store's check. */
export function deadLetterFault(entry: DeadLetter, maxItemBytes: number): string | undefined {
  if (!isCount(entry.seq) || entry.seq < 1) return `a dead letter has seq ${String(entry.seq)}`;
  if (!(entry.bytes instanceof Uint8Array) || entry.bytes.length > maxItemBytes)
    return `the dead letter of seq ${entry.seq} has no bytes or more than maxItemBytes`;
  if (!isCount(entry.deliveries)) return `the dead letter of seq ${entry.seq} has ${String(entry.deliveries)} deliveries`;
  if (!isCount(entry.firstDeliveredAt) || !isCount(entry.lastDeliveredAt) || !isCount(entry.deadAt)) {
    return `the dead letter of seq ${entry.seq} has a time that is not a non-negative integer`;
  }
  if (!isReason(entry.reason))
    return `the dead letter of seq ${entry.seq} has a reason that is not a string of at most ${MAX_REASON_BYTES} UTF-8 bytes`;
  return undefined;
}

/** What is wrong with a `deliveredBelow` bound, or undefined. */
export function belowFault(below: unknown): string | undefined {
  return isCount(below) && below >= 1 ? undefined : `deliveredBelow ${String(below)} is not a positive integer`;
}

/** The first seq that appears twice in `seqs`, or undefined. */
export function repeatedSeq(seqs: Iterable<number>): number | undefined {
  const seen = new Set<number>();
  for (const seq of seqs) {
    if (seen.has(seq)) return seq;
    seen.add(seq);
  }
  return undefined;
}
