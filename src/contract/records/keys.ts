/**
 * Checks of the idempotency keys the core hands to a store with `features.idempotency`, shared by
 * every store so that all of them refuse the same contract violations the same way (`ERR_STORE`,
 * nothing of the batch stored), and the one way they build the key list `open` reports.
 */
import { MAX_KEY_BYTES, type StoredItem, type StoredKey } from '../store.js';

const encoder = new TextEncoder();
/** A lone surrogate: UTF-8 has no encoding for it, so such a key could not be stored and read back equal. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * UTF-8 bytes of `text`, or -1 when it holds a lone surrogate (no UTF-8 encoding gives it back):
 * the measure of every name a store keeps with an item (keys, groups).
 */
export function utf8Length(text: string): number {
  // ASCII names (the common case) need no encoding to be measured.
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) > 0x7f) return LONE_SURROGATE.test(text) ? -1 : encoder.encode(text).length;
  }
  return text.length;
}

/** True when `key` is one a store accepts: a string of 1 to {@link MAX_KEY_BYTES} UTF-8 bytes. */
export function isValidKey(key: unknown): key is string {
  if (typeof key !== 'string') return false;
  const n = utf8Length(key);
  return n >= 1 && n <= MAX_KEY_BYTES;
}

/** What is wrong with the key of `item`, or undefined (an item without a key is fine). */
export function keyFault(item: StoredItem): string | undefined {
  const { key, keyedAt } = item;
  if (key === undefined && keyedAt === undefined) return undefined;
  if (!isValidKey(key)) return `seq ${item.seq} has key ${JSON.stringify(key)}, not a string of 1 to ${MAX_KEY_BYTES} UTF-8 bytes`;
  if (typeof keyedAt !== 'number' || !Number.isSafeInteger(keyedAt) || keyedAt < 0) {
    return `seq ${item.seq} has keyedAt ${String(keyedAt)}, not a non-negative safe integer`;
  }
  return undefined;
}

/** What is wrong with the first item of `items` whose key is refused, or undefined. */
export function firstKeyFault(items: readonly StoredItem[]): string | undefined {
  for (const item of items) {
    if (item.key === undefined && item.keyedAt === undefined) continue;
    const fault = keyFault(item);
    if (fault !== undefined) return fault;
  }
  return undefined;
}

/**
 * The keys a store keeps in memory, by seq, with the bound below which they may go: what
 * LogStore, SqliteStore and LevelStore hold between open and close so that `keepKeysFrom` knows
 * which keys to drop and a checkpoint knows which to keep.
 */
export class KeyTable {
  readonly #bySeq = new Map<number, StoredKey>();
  /** Keys with `keyedAt` below this may be dropped. */
  #keepFrom = 0;

  get size(): number {
    return this.#bySeq.size;
  }

  add(entry: StoredKey): void {
    this.#bySeq.set(entry.seq, entry);
  }

  /** Record the keys of `items` (those that have one). */
  addItems(items: readonly StoredItem[]): void {
    for (const item of items) {
      if (item.key !== undefined) this.#bySeq.set(item.seq, { key: item.key, seq: item.seq, keyedAt: item.keyedAt! });
    }
  }

  /** Raise the bound (never lowers it). */
  keepKeysFrom(at: number): void {
    if (at > this.#keepFrom) this.#keepFrom = at;
  }

  /**
   * Remove and return the seqs of the oldest keys while they are older than the bound. Keys are
   * added in seq order, which is the order of their times unless the queue's clock stepped back:
   * the walk stops at the first key inside the bound, so it costs the keys it drops, and a key
   * stored after a step back is dropped late, never early.
   */
  expire(): number[] {
    const gone: number[] = [];
    for (const [seq, entry] of this.#bySeq) {
      if (entry.keyedAt >= this.#keepFrom) break;
      gone.push(seq);
    }
    for (const seq of gone) this.#bySeq.delete(seq);
    return gone;
  }

  /** Every key held (older ones than the bound included until `expire`), in seq order. */
  list(): StoredKey[] {
    return [...this.#bySeq.values()].sort((a, b) => a.seq - b.seq);
  }
}
