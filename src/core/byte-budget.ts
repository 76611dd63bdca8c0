// Byte capacity (`Builder.capacityBytes`): the payload bytes of the stored, unacked items, counted
// so that a push waits while they would pass the bound. Only a queue with a byte capacity counts:
// a plain queue pays nothing per item for it.
import type { Entry } from './entry.js';

/** Payload bytes of `payloads`. */
export function payloadBytes(payloads: readonly Uint8Array[]): number {
  let bytes = 0;
  for (let i = 0; i < payloads.length; i++) bytes += payloads[i]!.byteLength;
  return bytes;
}

/**
 * The items stored since open are counted exactly, as their batches are stored and acked. The
 * items the store held at open are not read at open (a backlog of millions opens without reading
 * it), so the store gives a bound instead (`Store.payloadBytes`), which may be larger than their
 * bytes but never smaller. Each of those items subtracts its exact bytes when it leaves the queue,
 * and once the last one has left the bound is dropped: from then on the count is exact. Until
 * then a push may wait while the queue holds a little less than the bound; it never lets the
 * queue hold more.
 */
export class ByteBudget {
  /** The bound on unacked payload bytes. */
  readonly capacity: number;
  /** Items stored at open have seqs below this one. */
  readonly #openNextSeq: number;
  /** Payload bytes of the items stored since open and not acked nor moved out. */
  #live = 0;
  /** At least the payload bytes of the items stored at open that are still unacked. */
  #recovered: number;
  /** How many items stored at open are still unacked. */
  #recoveredLeft: number;

  constructor(capacity: number, recovery: { nextSeq: number; count: number }, recoveredBytes: number) {
    this.capacity = capacity;
    this.#openNextSeq = recovery.nextSeq;
    this.#recoveredLeft = recovery.count;
    this.#recovered = recovery.count === 0 ? 0 : recoveredBytes;
  }

  /** Payload bytes of the unacked items: exact once {@link exact} is true, an upper bound before. */
  get used(): number {
    return this.#live + this.#recovered;
  }

  /** True once no item stored at open is left: `used` is then exact. */
  get exact(): boolean {
    return this.#recoveredLeft === 0;
  }

  /** A batch was stored. */
  stored(items: readonly Entry[]): void {
    for (let i = 0; i < items.length; i++) this.#live += items[i]!.bytes.byteLength;
  }

  /** Items left the queue: acked, or moved into the dead letters. */
  removed(entries: readonly Entry[]): void {
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!;
      const bytes = entry.bytes.byteLength;
      if (entry.seq < this.#openNextSeq) {
        this.#recoveredLeft--;
        // The bound is never below the true bytes, so this stays non-negative; the clamp guards
        // a store whose bound was too low from ever letting the count go negative.
        this.#recovered = this.#recoveredLeft === 0 ? 0 : Math.max(0, this.#recovered - bytes);
      } else {
        this.#live -= bytes;
      }
    }
  }
}
