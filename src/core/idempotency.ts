// Producer-side idempotency keys: which key was pushed as which seq, for a window of time on the
// queue's clock, so that a push retried with the same key stores nothing and resolves with the
// seq the key already has. The store keeps each key in the same atomic write as its item and
// hands the keys back at open; this object is the queue's in-memory view of them.
import { QueueError } from '../contract/errors.js';
import type { Store, StoredKey } from '../contract/store.js';
import { abortReason } from './entry.js';

/** How long a key is remembered by default: 24 hours. */
export const DEFAULT_KEY_WINDOW_MS = 24 * 60 * 60 * 1000;
/** How many keys a queue remembers at most by default (see docs/guides/effectively-once.md, "Idempotency keys", for what one costs). */
export const DEFAULT_MAX_KEYS = 100_000;

/** Options of `Builder.idempotency`. */
export interface IdempotencyOptions {
  /**
   * A key is remembered while less than this many ms (a positive integer) passed since it was
   * stored, on the queue's clock.
   * @default 86400000 (24 hours)
   */
  windowMs?: number;
  /**
   * At most this many keys are remembered (a positive integer); a push of a new key beyond it
   * rejects with `ERR_KEYS_FULL`.
   * @default 100000
   */
  maxKeys?: number;
}

/** The resolved options. @internal */
export interface KeyWindow {
  /** A key is remembered while less than this many ms passed since it was stored. */
  readonly windowMs: number;
  /** At most this many keys remembered (pushes being stored included). */
  readonly maxKeys: number;
}

/** One remembered key, in the order keys were stored. */
interface KnownKey {
  readonly key: string;
  readonly seq: number;
  readonly keyedAt: number;
}

/** Stores an item with its key; resolves with the item's seq. */
export type KeyedStore = (keyedAt: number) => Promise<number>;

/** Stores the payloads of `indices` (positions in a `pushMany` batch) with their keys, as one batch; resolves with their seqs. */
export type KeyedStoreMany = (indices: number[], keyedAt: number) => Promise<number[]>;

/** A promise with the functions that settle it. */
function outcome<T>(): { promise: Promise<T>; resolve: (value: T) => void; reject: (error: unknown) => void } {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The keys of one open queue. @internal */
export class IdempotencyKeys {
  readonly #store: Store;
  readonly #windowMs: number;
  readonly #maxKeys: number;
  /** The newest seq of each remembered key. */
  readonly #known = new Map<string, KnownKey>();
  /** Remembered keys in the order they were stored: the oldest go first. */
  #order: KnownKey[] = [];
  #orderHead = 0;
  /** Keys whose item is being stored: later pushes of the key wait for it. */
  readonly #pending = new Map<string, Promise<number>>();
  /** The last bound handed to `Store.keepKeysFrom`. */
  #keptFrom = 0;

  /** The queue clock's wall time, in ms since the epoch. */
  readonly #now: () => number;

  constructor(store: Store, window: KeyWindow, now: () => number) {
    this.#store = store;
    this.#now = now;
    this.#windowMs = window.windowMs;
    this.#maxKeys = window.maxKeys;
  }

  /** Keys remembered now, the ones being stored included. */
  get size(): number {
    return this.#known.size + this.#pending.size;
  }

  /**
   * Take the keys a store reported at open: for each key the highest seq, if still inside the
   * window at the queue's clock. All of them are kept, even past `maxKeys` (a queue reopened with a smaller
   * bound): new keys are refused until enough expire.
   */
  load(keys: readonly StoredKey[]): void {
    const now = Math.floor(this.#now());
    const from = now - this.#windowMs;
    for (const k of keys) {
      if (k.keyedAt <= from) continue;
      const held = this.#known.get(k.key);
      if (held === undefined || held.seq < k.seq) this.#known.set(k.key, { key: k.key, seq: k.seq, keyedAt: k.keyedAt });
    }
    this.#order = [...this.#known.values()].sort((a, b) => a.keyedAt - b.keyedAt || a.seq - b.seq);
    this.#expire(now);
  }

  /**
   * Push under `key`: the seq the key has when it is remembered, the seq of the push of the key
   * being stored when there is one, else what `store` stores. `signal` only ends the wait for
   * another push of the key (that push goes on).
   */
  push(key: string, signal: AbortSignal | undefined, store: KeyedStore): Promise<number> {
    const now = Math.floor(this.#now());
    this.#expire(now);
    const known = this.#known.get(key);
    if (known !== undefined) return Promise.resolve(known.seq);
    const pending = this.#pending.get(key);
    if (pending !== undefined) return this.#follow(pending, key, signal, store);
    if (this.size >= this.#maxKeys) {
      return Promise.reject(
        new QueueError(
          'ERR_KEYS_FULL',
          `The queue remembers ${this.#maxKeys} idempotency keys (maxKeys), none older than its window of ${this.#windowMs} ms: a new key is refused until one expires`,
        ),
      );
    }
    // Pending before the store is asked: over a store that stores during the call (`Store.done`),
    // a push of the same key made meanwhile (by a diagnostics subscriber) must find it.
    const { promise: stored, resolve, reject } = outcome<number>();
    this.#pending.set(key, stored);
    store(now).then(
      (seq) => {
        this.#pending.delete(key);
        const entry = { key, seq, keyedAt: now };
        this.#known.set(key, entry);
        this.#order.push(entry);
        resolve(seq);
      },
      (error: unknown) => {
        // Nothing was stored under the key: it is free again.
        this.#pending.delete(key);
        reject(error);
      },
    );
    return stored;
  }

  /**
   * Push a batch under `keys` (one per payload): each key remembered, or being stored, gives its
   * seq as `push` does; a key that appears twice gets the seq of its first payload; the others are
   * stored by `store` as one batch. Resolves with a seq per payload, in order. The batch is refused
   * whole with `ERR_KEYS_FULL` when its new keys do not fit under `maxKeys`.
   */
  pushMany(
    keys: readonly string[],
    signal: AbortSignal | undefined,
    store: KeyedStoreMany,
    storeOne: (index: number) => KeyedStore,
  ): Promise<number[]> {
    const now = Math.floor(this.#now());
    this.#expire(now);
    const seqs = new Array<number>(keys.length);
    const waits: Promise<void>[] = [];
    const fresh: number[] = [];
    const firstOf = new Map<string, number>();
    const copies: [number, number][] = [];
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      const known = this.#known.get(key);
      if (known !== undefined) {
        seqs[i] = known.seq;
        continue;
      }
      const first = firstOf.get(key);
      if (first !== undefined) {
        copies.push([i, first]);
        continue;
      }
      firstOf.set(key, i);
      const pending = this.#pending.get(key);
      if (pending !== undefined) waits.push(this.#follow(pending, key, signal, storeOne(i)).then((seq) => void (seqs[i] = seq)));
      else fresh.push(i);
    }
    if (fresh.length > 0 && this.size + fresh.length > this.#maxKeys) {
      return Promise.reject(
        new QueueError(
          'ERR_KEYS_FULL',
          `The queue remembers ${this.#maxKeys} idempotency keys (maxKeys), none older than its window of ${this.#windowMs} ms: ${fresh.length} new keys do not fit`,
        ),
      );
    }
    if (fresh.length > 0) {
      // Every new key is pending before the store is asked, as in push().
      const ones = fresh.map((index) => {
        const one = outcome<number>();
        // Its own rejection is the batch's: handled through `waits` below, never unhandled here.
        one.promise.catch(() => undefined);
        this.#pending.set(keys[index]!, one.promise);
        waits.push(one.promise.then((seq) => void (seqs[index] = seq)));
        return one;
      });
      store(fresh, now).then(
        (got) => {
          fresh.forEach((index, j) => {
            const key = keys[index]!;
            this.#pending.delete(key);
            const entry = { key, seq: got[j]!, keyedAt: now };
            this.#known.set(key, entry);
            this.#order.push(entry);
            ones[j]!.resolve(entry.seq);
          });
        },
        (error: unknown) => {
          fresh.forEach((index, j) => {
            this.#pending.delete(keys[index]!);
            ones[j]!.reject(error);
          });
        },
      );
    }
    return Promise.all(waits).then(() => {
      for (const [i, first] of copies) seqs[i] = seqs[first]!;
      return seqs;
    });
  }

  /** Wait for the push of `key` being stored; if it fails, push again (this caller's own push). */
  #follow(pending: Promise<number>, key: string, signal: AbortSignal | undefined, store: KeyedStore): Promise<number> {
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    return new Promise<number>((resolve, reject) => {
      const onAbort = () => reject(abortReason(signal!));
      signal?.addEventListener('abort', onAbort, { once: true });
      const done = (seq: number) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(seq);
      };
      pending.then(done, () => {
        if (signal?.aborted) return;
        this.push(key, signal, store).then(done, (error: unknown) => {
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        });
      });
    });
  }

  /** Forget keys stored `windowMs` or longer ago, and tell the store it may drop them. */
  #expire(now: number): void {
    const from = now - this.#windowMs;
    const order = this.#order;
    let head = this.#orderHead;
    while (head < order.length && order[head]!.keyedAt <= from) {
      const old = order[head]!;
      order[head++] = undefined as unknown as KnownKey;
      if (this.#known.get(old.key) === old) this.#known.delete(old.key);
    }
    if (head === order.length) {
      this.#order = [];
      head = 0;
    } else if (head > 1024 && head * 2 > order.length) {
      this.#order = order.slice(head);
      head = 0;
    }
    this.#orderHead = head;
    const keepFrom = Math.max(0, from + 1);
    if (keepFrom > this.#keptFrom) {
      this.#keptFrom = keepFrom;
      this.#store.keepKeysFrom!(keepFrom);
    }
  }
}
