import type { ReadRange, Store, StoredItem, StoreRecovery } from 'persistent-queue';

/** Any ordered key/value database with batched writes (LevelDB, LMDB, IndexedDB, a SQL table, ...). */
export interface KV {
  get(key: string): Promise<string | undefined>;
  /** Keys in [gt, lt) order, with values. */
  range(gt: string, lt: string, limit: number): Promise<[string, string][]>;
  batch(ops: { put?: [string, string]; del?: string }[], sync: boolean): Promise<void>;
  close(): Promise<void>;
}

/** Keys sort by seq because they are zero-padded to 16 digits. */
const itemKey = (seq: number) => `item:${String(seq).padStart(16, '0')}`;
const seqOf = (key: string) => Number(key.slice(5));

/** A Store over a KV: one key per unacked item, plus the next seq. */
export class KVStore implements Store {
  readonly maxItemBytes = 1024 * 1024;
  readonly features = { reopen: true, crashSafe: false };
  #count = 0;

  constructor(readonly kv: KV) {}

  async open(): Promise<StoreRecovery> {
    const nextSeq = Number((await this.kv.get('meta:nextSeq')) ?? '1');
    this.#count = (await this.kv.range('item:', 'item;', Number.MAX_SAFE_INTEGER)).length;
    return { nextSeq, count: this.#count };
  }

  async append(items: readonly StoredItem[], sync: boolean): Promise<void> {
    const ops = items.map((i) => ({ put: [itemKey(i.seq), Buffer.from(i.bytes).toString('base64')] as [string, string] }));
    ops.push({ put: ['meta:nextSeq', String(items[items.length - 1]!.seq + 1)] });
    await this.kv.batch(ops, sync);
    this.#count += items.length;
  }

  async ack(seqs: readonly number[], sync: boolean): Promise<void> {
    await this.kv.batch(
      seqs.map((s) => ({ del: itemKey(s) })),
      sync,
    );
    this.#count -= seqs.length;
  }

  async read({ after, before, limit }: ReadRange): Promise<StoredItem[]> {
    const rows = await this.kv.range(itemKey(after), itemKey(before), limit + 1);
    return rows
      .filter(([key]) => seqOf(key) > after)
      .slice(0, limit)
      .map(([key, value]) => ({ seq: seqOf(key), bytes: new Uint8Array(Buffer.from(value, 'base64')) }));
  }

  close(): Promise<void> {
    return this.kv.close();
  }
}
