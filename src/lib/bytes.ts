/**
 * Cheap copies of small payloads. Allocating a Uint8Array per item costs about 370 ns on Node 20
 * (each one gets its own ArrayBuffer); copying into a slab and taking a view costs about 50 ns.
 * A slab stays alive while any view into it does, which bounds the waste to one slab per
 * long-lived small item.
 *
 * Each queue and each store has an arena of its own, so a view's `.buffer` never holds another
 * queue's payloads; within one queue, `item.bytes.buffer` is shared with neighbouring items and
 * must not be transferred (docs/reference/api.md, "`Reserved`").
 */

const SLAB_BYTES = 64 * 1024;

/**
 * `bytes`, or a copy of them when they are a small view into a buffer larger than a slab (a
 * store's read-ahead chunk, a client's receive buffer): for what the queue keeps for long (a
 * delayed retry, a dead letter), so that one kept item does not keep a whole chunk alive. The
 * queue's own slab copies and buffers of their own are kept as they are.
 */
export function unpinned(bytes: Uint8Array): Uint8Array {
  const whole = bytes.buffer.byteLength;
  if (whole <= SLAB_BYTES || whole === bytes.byteLength) return bytes;
  const own = new Uint8Array(bytes.byteLength);
  own.set(bytes);
  return own;
}
/** Items at least this large get their own buffer: they would waste too much of a slab. */
const SLAB_ITEM_BYTES_MAX = 4096;

export class ByteArena {
  #slab = new Uint8Array(0);
  /** The slab's ArrayBuffer, kept: reading `.buffer` is a call into the runtime on every copy. */
  #slabBuffer = this.#slab.buffer;
  #offset = 0;

  /** A copy of `bytes` that shares no memory with it. */
  copy(bytes: Uint8Array): Uint8Array {
    const length = bytes.byteLength;
    if (length >= SLAB_ITEM_BYTES_MAX) {
      // Not `bytes.slice()`: on a Node Buffer that is a view of the same memory, not a copy.
      const own = new Uint8Array(length);
      own.set(bytes);
      return own;
    }
    let slab = this.#slab;
    if (this.#offset + length > slab.length) {
      this.#slabBuffer = new ArrayBuffer(SLAB_BYTES);
      slab = this.#slab = new Uint8Array(this.#slabBuffer);
      this.#offset = 0;
    }
    const start = this.#offset;
    slab.set(bytes, start);
    this.#offset = start + length;
    // A constructed view is measurably cheaper than `subarray`, which looks up the species constructor.
    return new Uint8Array(this.#slabBuffer, start, length);
  }
}
