/** Test stores: a MemStore that records calls and lets a test hold appends and acks open. */
import { MemStore } from '../../src/stores/mem/mem-store.js';
import type { ReadRange, StoredItem } from '../../src/contract/store.js';

export interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
  reject: (error: unknown) => void;
}

export function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

export interface Call {
  op: 'append' | 'ack';
  seqs: number[];
  sync: boolean;
}

/** A MemStore that logs every append/ack and, when `hold` is set, waits for the test to release each call. */
export class RecordingStore extends MemStore {
  calls: Call[] = [];
  hold = false;
  held: Deferred[] = [];
  /** When set, the next append rejects with this error (once). */
  failNextAppend: unknown;
  failNextAck: unknown;
  asyncReads = false;
  reads = 0;

  override async append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    this.calls.push({ op: 'append', seqs: items.map((i) => i.seq), sync });
    if (this.failNextAppend !== undefined) {
      const e = this.failNextAppend;
      this.failNextAppend = undefined;
      throw e;
    }
    await this.#maybeHold();
    return super.append(items, sync);
  }

  override async ack(seqs: readonly number[], sync: boolean): Promise<void> {
    this.calls.push({ op: 'ack', seqs: [...seqs], sync });
    if (this.failNextAck !== undefined) {
      const e = this.failNextAck;
      this.failNextAck = undefined;
      throw e;
    }
    await this.#maybeHold();
    return super.ack(seqs, sync);
  }

  override read(range: ReadRange): readonly StoredItem[] | Promise<readonly StoredItem[]> {
    this.reads++;
    const items = super.read(range);
    return this.asyncReads ? Promise.resolve().then(() => items) : items;
  }

  async #maybeHold(): Promise<void> {
    if (!this.hold) return;
    const d = deferred();
    this.held.push(d);
    await d.promise;
  }

  /** Wait until `n` calls are being held. */
  async heldCount(n: number): Promise<void> {
    while (this.held.length < n) await new Promise((r) => setImmediate(r));
  }

  releaseAll(): void {
    for (const d of this.held.splice(0)) d.resolve();
  }
}

/** Let every queued microtask and one macrotask turn run. */
export function tick(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

/**
 * A store written against the first Store contract: it keeps items, and nothing else (no delivery
 * counts, no dead letters, no priorities or not-before times), over a MemStore.
 */
export function firstContractStore(): import('../../src/contract/store.js').Store {
  const inner = new MemStore();
  return {
    maxItemBytes: inner.maxItemBytes,
    features: { reopen: true, crashSafe: false },
    open: () => inner.open(),
    append: (items, sync) =>
      inner.append(
        items.map(({ seq, bytes }) => ({ seq, bytes })),
        sync,
      ),
    ack: (seqs, sync) => inner.ack(seqs, sync),
    read: (range) => inner.read(range),
    close: () => inner.close(),
  };
}
