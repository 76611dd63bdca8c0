// The dead-letter queue as the consumer sees it: count, list, peek, iterate, redrive, purge.
// Redrives and purges run one at a time, so one never moves a dead letter the other removed.
import type { QueueDeadLetters } from '../api/handles.js';
import type { DeadLetterListOptions, DeadLetterSelection } from '../api/types.js';
import { AsyncSchemaError, isRaw } from '../lib/codec.js';
import { QueueError } from '../contract/errors.js';
import type { DeadLetter } from '../contract/store.js';
import { expectation, knownKeys, optionsObject, positiveInteger } from '../lib/validate.js';
import type { QueueCore } from './queue-core.js';

/** How many dead letters one store read returns while iterating, redriving or purging. */
const PAGE = 256;

export type { DeadLetterListOptions, DeadLetterSelection } from '../api/types.js';

function nonNegativeSeq(name: string, value: unknown): number {
  if (typeof value !== 'number') throw new TypeError(expectation(name, 'a non-negative integer', value));
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(expectation(name, 'a non-negative integer', value));
  return value;
}

/** The dead letters an options object chooses, checked. @internal */
export function selection(options: DeadLetterSelection | undefined): { seqs: Set<number> | undefined; limit: number } {
  const o = optionsObject('options', options);
  knownKeys('options', o, ['seqs', 'limit']);
  const limit = o.limit === undefined ? Infinity : positiveInteger('options.limit', o.limit, true);
  if (o.seqs === undefined) return { seqs: undefined, limit };
  if (o.seqs === null || typeof (o.seqs as Iterable<number>)[Symbol.iterator] !== 'function' || typeof o.seqs === 'string') {
    throw new TypeError(expectation('options.seqs', 'an iterable of seqs', o.seqs));
  }
  const seqs = new Set<number>();
  for (const seq of o.seqs as Iterable<unknown>) seqs.add(nonNegativeSeq('options.seqs[]', seq));
  return { seqs, limit };
}

/**
 * The items moved out of the queue: by `maxDeliveries`, or by `item.deadLetter(reason)`. They
 * are kept in the same store, in the order of the seqs they had, with their bytes and their
 * delivery history, until redriven or purged.
 */
export class DeadLetterQueue<T = Uint8Array> implements QueueDeadLetters {
  readonly #core: QueueCore;
  /** The redrive or purge running now; the next one waits for it. */
  #lane: Promise<unknown> = Promise.resolve();

  /** @internal */
  constructor(core: QueueCore) {
    this.#core = core;
  }

  /**
   * How many dead letters the store holds (kept in memory: no store read). Throws what `list()`
   * rejects with once the queue is closed or failed (`ERR_CLOSED`, `ERR_STORE_FAILED`): the two
   * answer about the same store, and a closed queue holds none; `stats().deadLetters` keeps the
   * last figure.
   */
  count(): number {
    const error = this.#core.operationalError();
    if (error) throw error;
    return this.#core.ledger?.deadLetters ?? 0;
  }

  /** Dead letters in seq order, from `after` on, at most `limit`. */
  async list(options?: DeadLetterListOptions): Promise<DeadLetter[]> {
    const o = optionsObject('options', options);
    knownKeys('options', o, ['after', 'limit']);
    const after = o.after === undefined ? 0 : nonNegativeSeq('options.after', o.after);
    const limit = o.limit === undefined ? 100 : positiveInteger('options.limit', o.limit);
    return [...(await this.#core.readDeadLetters(after, limit))];
  }

  /**
   * The value a dead letter holds, decoded (and validated) by the queue's codec as a reservation
   * is: for the default byte queue, its bytes. Dead letters keep their bytes exactly as pushed, so
   * one may hold a payload that never decoded (that may be why it is there): that throws
   * `QueueError` `ERR_INVALID` with the reason, and the dead letter stays as it is.
   */
  decode(letter: DeadLetter): T {
    const bytes = (letter as Partial<DeadLetter> | null)?.bytes;
    if (letter === null || typeof letter !== 'object' || !(bytes instanceof Uint8Array)) {
      throw new TypeError(expectation('letter', 'a dead letter ({ seq, bytes, ... })', letter));
    }
    const codec = this.#core.codec;
    if (isRaw(codec)) return bytes as T;
    try {
      return codec.decode(bytes) as T;
    } catch (error) {
      if (error instanceof AsyncSchemaError) throw error;
      const message = (error as Error)?.message ?? String(error);
      throw new QueueError(
        'ERR_INVALID',
        `Dead letter ${String(letter.seq)} does not decode as a value of the ${codec.name} queue: ${message}`,
        { cause: error },
      );
    }
  }

  /** The oldest dead letter, or null when there is none. */
  async peek(): Promise<DeadLetter | null> {
    return (await this.#core.readDeadLetters(0, 1))[0] ?? null;
  }

  /** Every dead letter in seq order, read a page at a time. */
  async *[Symbol.asyncIterator](): AsyncGenerator<DeadLetter, void, undefined> {
    let after = 0;
    for (;;) {
      const page = await this.#core.readDeadLetters(after, PAGE);
      if (page.length === 0) return;
      yield* page;
      after = page[page.length - 1]!.seq;
    }
  }

  /**
   * Put dead letters back into the queue as new items (new seqs, newest in the queue, fresh
   * delivery counts), oldest first. Each move is crash-safe: after a crash an item is a dead
   * letter or back in the queue, never both. Waits for capacity as a push does. Resolves with the
   * new seqs, in the order of the dead letters they came from.
   */
  redrive(options?: DeadLetterSelection): Promise<number[]> {
    let chosen: ReturnType<typeof selection>;
    try {
      chosen = selection(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#inLane(async () => {
      const seqs: number[] = [];
      await this.#select(chosen, async (page) => {
        seqs.push(...(await this.#core.redriveLetters(page)));
      });
      return seqs;
    });
  }

  /** Delete dead letters for good. Resolves with how many were deleted. */
  purge(options?: DeadLetterSelection): Promise<number> {
    let chosen: ReturnType<typeof selection>;
    try {
      chosen = selection(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#inLane(async () => {
      let count = 0;
      await this.#select(chosen, async (page) => {
        await this.#core.dropDeadLetters(page.map((d) => d.seq));
        count += page.length;
      });
      return count;
    });
  }

  #inLane<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lane.then(fn, fn);
    this.#lane = run.catch(() => undefined);
    return run;
  }

  /** Hand the chosen dead letters to `each`, a page at a time, oldest first. */
  async #select(chosen: ReturnType<typeof selection>, each: (page: DeadLetter[]) => Promise<void>): Promise<void> {
    let left = chosen.limit;
    // Each page is read after the previous one was handled: what `each` removed is not read again.
    let after = 0;
    while (left > 0) {
      const page = await this.#core.readDeadLetters(after, PAGE);
      if (page.length === 0) return;
      after = page[page.length - 1]!.seq;
      const picked = (chosen.seqs === undefined ? page : page.filter((d) => chosen.seqs!.has(d.seq))).slice(0, Math.min(left, PAGE));
      if (picked.length > 0) {
        await each(picked);
        left -= picked.length;
      }
      if (page.length < PAGE) return;
    }
  }
}
