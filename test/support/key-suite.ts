/**
 * Tests every database store with `features.idempotency` (SqliteStore, LevelStore) must pass beyond
 * the conformance suite: the format rules (a store that never holds a key keeps its older format,
 * the first keyed item raises it to 4, format 5 is refused and nothing changes), keys kept after
 * the item's ack and dead-letter move, keys past `keepKeysFrom` deleted by the next append, and a
 * damaged key entry refused at open. Store-specific layout checks live in each test file.
 */
import { rmSync } from 'node:fs';
import { expect, test } from 'vitest';
import { isQueueError } from '../../src/contract/errors.js';
import { Builder } from '../../src/core/builder.js';
import type { StoredItem } from '../../src/contract/store.js';
import { freshDir } from './backend-suite.js';
import type { SchedulingBackend } from './scheduling-suite.js';

export interface KeyBackend extends Pick<SchedulingBackend, 'name' | 'open' | 'pathIn' | 'format' | 'setFormat' | 'snapshot'> {
  /** The seqs of a closed store's key entries (rows or keys), in order. */
  keyEntries(path: string): Promise<number[]>;
  /** Damage the key entry of `seq` in a closed store: a value no append writes. */
  damageKey(path: string, seq: number): Promise<void>;
}

const T = 1_800_000_000_000;
const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const keyed = (seq: number, key: string, keyedAt = T): StoredItem => ({ seq, bytes: bytes(key), key, keyedAt });

export function runKeySuite(b: KeyBackend): void {
  const withStore = async (fn: (path: string) => Promise<void>): Promise<void> => {
    const dir = freshDir(`pq-${b.name.toLowerCase()}-keys-`);
    try {
      await fn(b.pathIn(dir));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  test(`${b.name}: a queue that never pushes a key leaves the store at format 2; the first keyed item makes it format 4`, () =>
    withStore(async (path) => {
      let [tx, rx] = await new Builder(await b.open(path)).open();
      await tx.push('plain');
      await (await rx.reserve())!.ack();
      await tx.close();
      expect(await b.format(path)).toBe(2);
      expect(await b.keyEntries(path)).toEqual([]);
      [tx, rx] = await new Builder(await b.open(path)).open();
      const seq = await tx.push('keyed', { key: 'k' });
      await tx.close();
      expect(await b.format(path)).toBe(4);
      expect(await b.keyEntries(path)).toEqual([seq]);
    }));

  test(`${b.name}: a format-4 store is refused with ERR_UNSUPPORTED_VERSION at format 5 and left unchanged`, () =>
    withStore(async (path) => {
      const store = await b.open(path);
      await store.open();
      await store.append([keyed(1, 'k')], true);
      await store.close();
      expect(await b.format(path)).toBe(4);
      await b.setFormat(path, 5);
      const before = await b.snapshot(path);
      await expect(b.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
      expect(await b.snapshot(path)).toEqual(before);
    }));

  test(`${b.name}: keys outlive their item's ack and dead-letter move; keys past keepKeysFrom go with the next append`, () =>
    withStore(async (path) => {
      let store = await b.open(path);
      await store.open();
      await store.append([keyed(1, 'a', T), keyed(2, 'b', T + 1), keyed(3, 'c', T + 2), { seq: 4, bytes: bytes('plain') }], true);
      await store.ack([1], true);
      await store.deadLetter([
        { seq: 2, bytes: bytes('b'), deliveries: 1, firstDeliveredAt: 1, lastDeliveredAt: 1, deadAt: 1, reason: 'r' },
      ]);
      await store.close();
      expect(await b.keyEntries(path)).toEqual([1, 2, 3]);
      store = await b.open(path);
      const r = await store.open();
      expect(r.keys).toEqual([
        { key: 'a', seq: 1, keyedAt: T },
        { key: 'b', seq: 2, keyedAt: T + 1 },
        { key: 'c', seq: 3, keyedAt: T + 2 },
      ]);
      store.keepKeysFrom!(T + 2);
      // Nothing is written by the bound alone: the next append deletes what it lets go.
      await store.ack([3], true);
      await store.close();
      expect(await b.keyEntries(path)).toEqual([1, 2, 3]);
      store = await b.open(path);
      await store.open();
      store.keepKeysFrom!(T + 2);
      await store.append([{ seq: 5, bytes: bytes('plain') }], true);
      await store.close();
      expect(await b.keyEntries(path)).toEqual([3]);
    }));

  test(`${b.name}: a damaged key entry is ERR_CORRUPT at open and nothing changes`, () =>
    withStore(async (path) => {
      const store = await b.open(path);
      await store.open();
      await store.append([keyed(1, 'k'), keyed(2, 'l')], true);
      await store.close();
      await b.damageKey(path, 2);
      const before = await b.snapshot(path);
      await expect(b.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
      expect(await b.snapshot(path)).toEqual(before);
    }));
}
