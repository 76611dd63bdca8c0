// The dead letters of a JetStream queue: a stream of their own, one message per dead letter, its
// payload the item's bytes and its headers the item's history (core.ts, DEAD_HEADERS). Listed in
// the order of the seqs the items had, as the embedded dead letters are.
import type { QueueDeadLetters } from '../../api/handles.js';
import type { StoredMsg } from '@nats-io/jetstream';
import type { DeadLetter } from '../../contract/store.js';
import { type DeadLetterListOptions, type DeadLetterSelection, selection } from '../../core/dead-letters.js';
import { expectation, knownKeys, optionsObject, positiveInteger } from '../../lib/validate.js';
import { DEAD_HEADERS, type JetStreamCore, publishError } from './core.js';

interface Found {
  readonly letter: DeadLetter;
  /** Its sequence in the dead-letter stream. */
  readonly at: number;
}

function numberHeader(msg: StoredMsg, name: string): number {
  const n = Number(msg.header.get(name));
  return Number.isFinite(n) ? n : 0;
}

function letterOf(msg: StoredMsg): DeadLetter {
  let reason = msg.header.get(DEAD_HEADERS.reason);
  try {
    reason = decodeURIComponent(reason);
  } catch {
    // Written by something else: kept as it is.
  }
  return {
    seq: numberHeader(msg, DEAD_HEADERS.seq),
    bytes: msg.data,
    deliveries: numberHeader(msg, DEAD_HEADERS.deliveries),
    firstDeliveredAt: numberHeader(msg, DEAD_HEADERS.firstDeliveredAt),
    lastDeliveredAt: numberHeader(msg, DEAD_HEADERS.lastDeliveredAt),
    deadAt: numberHeader(msg, DEAD_HEADERS.deadAt),
    reason,
  };
}

/**
 * The dead-letter stream as the consumer sees it. Unlike the embedded queue's, `count()` asks the
 * server, so it returns a promise; listing reads the stream message by message, so it is meant
 * for dead letters counted in thousands. Both wait first for the moves this process has under
 * way, so that they see them.
 */
export class JetStreamDeadLetters implements QueueDeadLetters {
  readonly #core: JetStreamCore;
  #lane: Promise<unknown> = Promise.resolve();

  /** @internal */
  constructor(core: JetStreamCore) {
    this.#core = core;
  }

  /** How many dead letters the stream holds. */
  async count(): Promise<number> {
    this.#check();
    await Promise.allSettled([...this.#core.moves]);
    const { jsm, names } = this.#core.s;
    return this.#core.api('the count of dead letters', async () => (await jsm.streams.info(names.deadLetterStream)).state.messages);
  }

  /** Dead letters in the order of their seqs, from `after` on, at most `limit`. */
  async list(options?: DeadLetterListOptions): Promise<DeadLetter[]> {
    const o = optionsObject('options', options);
    knownKeys('options', o, ['after', 'limit']);
    let after = 0;
    if (o.after !== undefined) {
      if (typeof o.after !== 'number') throw new TypeError(expectation('options.after', 'a non-negative integer', o.after));
      if (!Number.isSafeInteger(o.after) || o.after < 0)
        throw new RangeError(expectation('options.after', 'a non-negative integer', o.after));
      after = o.after;
    }
    const limit = o.limit === undefined ? 100 : positiveInteger('options.limit', o.limit);
    return (await this.#all())
      .filter((f) => f.letter.seq > after)
      .slice(0, limit)
      .map((f) => f.letter);
  }

  /** The oldest dead letter, or null. */
  async peek(): Promise<DeadLetter | null> {
    return (await this.list({ limit: 1 }))[0] ?? null;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<DeadLetter, void, undefined> {
    for (const found of await this.#all()) yield found.letter;
  }

  /**
   * Put dead letters back into the queue as new items (new seqs, delivery counts from 1), oldest
   * first: each is published to the queue stream, then deleted from the dead letters. A crash
   * between the two leaves it in both (a redrive may duplicate, never lose).
   */
  redrive(options?: DeadLetterSelection): Promise<number[]> {
    let chosen: ReturnType<typeof selection>;
    try {
      chosen = selection(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#inLane(async () => {
      const core = this.#core;
      const { jsm, names } = core.s;
      const seqs: number[] = [];
      for (const found of await this.#chosen(chosen)) {
        let ack;
        try {
          ack = await core.publish(names.subject, found.letter.bytes);
        } catch (cause) {
          throw publishError(`the redrive of dead letter ${found.letter.seq} (it is still a dead letter)`, cause);
        }
        await core.api(
          `the delete of dead letter ${found.letter.seq}, redriven as item ${ack.seq} (it may be in both)`,
          () => jsm.streams.deleteMessage(names.deadLetterStream, found.at, false),
          true,
        );
        seqs.push(ack.seq);
      }
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
      const { jsm, names } = this.#core.s;
      let count = 0;
      for (const found of await this.#chosen(chosen)) {
        await this.#core.api(
          `the purge of dead letter ${found.letter.seq}`,
          () => jsm.streams.deleteMessage(names.deadLetterStream, found.at, false),
          true,
        );
        count++;
      }
      return count;
    });
  }

  #check(): void {
    const error = this.#core.operationalError();
    if (error) throw error;
  }

  async #chosen(chosen: ReturnType<typeof selection>): Promise<Found[]> {
    const all = await this.#all();
    const picked = chosen.seqs === undefined ? all : all.filter((f) => chosen.seqs!.has(f.letter.seq));
    return picked.slice(0, chosen.limit === Infinity ? undefined : chosen.limit);
  }

  /** Every dead letter, in the order of the seqs the items had. */
  async #all(): Promise<Found[]> {
    this.#check();
    await Promise.allSettled([...this.#core.moves]);
    const { jsm, names } = this.#core.s;
    const found: Found[] = [];
    await this.#core.api('a read of the dead letters', async () => {
      const state = (await jsm.streams.info(names.deadLetterStream)).state;
      for (let at = state.first_seq; at <= state.last_seq && state.messages > 0; at++) {
        const msg = await jsm.streams.getMessage(names.deadLetterStream, { seq: at });
        if (msg !== null) found.push({ letter: letterOf(msg), at });
      }
    });
    return found.sort((a, b) => a.letter.seq - b.letter.seq);
  }

  #inLane<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lane.then(fn, fn);
    this.#lane = run.catch(() => undefined);
    return run;
  }
}
