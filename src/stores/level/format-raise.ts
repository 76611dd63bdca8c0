/**
 * How LevelStore raises `m:format` (FORMAT.md §11.4): the batch that hands LevelDB the first
 * record of a format also puts `m:format` = that format, and no key of a format may land while
 * `m:format` says a lower one, nor a lower `m:format` land after a higher one.
 *
 * LevelDB may apply two batches in flight in either order (each runs on a thread of its own), so
 * a batch that raises the format waits for the raise in flight before it, and a batch that relies
 * on a raise still in flight waits for that raise. Both waits happen only while a raise is in
 * flight: once per format, at the upgrade.
 */
import { FORMAT_KEY, u64 } from './format.js';
import type { BatchOp } from './peer.js';

export type WriteBatch = (ops: BatchOp[], sync: boolean) => Promise<void>;

export class FormatRaise {
  /** The `m:format` stored: raised once the batch that raised it has landed. */
  #landed: number;
  /** The highest `m:format` handed to LevelDB, set before its batch lands. */
  #issued: number;
  /** The batch in flight that raises `m:format` to `#issued`, settled either way. */
  #raising: Promise<void> | undefined;
  readonly #write: WriteBatch;

  constructor(format: number, write: WriteBatch) {
    this.#landed = format;
    this.#issued = format;
    this.#write = write;
  }

  /** The format the store is at: that of the batches that have landed. */
  get format(): number {
    return this.#landed;
  }

  /** Write `ops`, which hold records that `format` adds, raising `m:format` to it if no batch did so already. */
  async write(ops: BatchOp[], sync: boolean, format: number): Promise<void> {
    if (this.#landed >= format) return this.#write(ops, sync);
    const earlier = this.#raising;
    if (this.#issued >= format) {
      await earlier;
      return this.#write(ops, sync);
    }
    this.#issued = format;
    ops.push({ type: 'put', key: FORMAT_KEY, value: u64(format) });
    const raising = (async () => {
      await earlier;
      await this.#write(ops, sync);
      this.#landed = Math.max(this.#landed, format);
    })();
    // Settled either way for the batches that wait on it: a failed write fails the store, and
    // theirs then fail too.
    this.#raising = raising.catch(() => undefined);
    return raising;
  }
}
