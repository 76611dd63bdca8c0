import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../../../src/contract/errors.js';
import { LevelStore } from '../../../src/stores/level/index.js';
import { FormatRaise } from '../../../src/stores/level/format-raise.js';
import type { BatchOp } from '../../../src/stores/level/peer.js';
import { freshDir } from '../../support/backend-suite.js';
import { runSchedulingSuite } from '../../support/scheduling-suite.js';
import { runKeySuite } from '../../support/key-suite.js';

type Raw = {
  get(k: Buffer): Promise<Buffer | undefined>;
  put(k: Buffer, v: Buffer): Promise<void>;
  iterator(): { all(): Promise<[Buffer, Buffer][]> };
  open(): Promise<void>;
  close(): Promise<void>;
};

/** Run `fn` over a closed store's LevelDB directly. */
async function withRaw<T>(path: string, fn: (db: Raw) => Promise<T>): Promise<T> {
  const { ClassicLevel } = await import('classic-level');
  const db = new ClassicLevel<Buffer, Buffer>(path, {
    keyEncoding: 'buffer',
    valueEncoding: 'buffer',
    createIfMissing: false,
  }) as unknown as Raw;
  await db.open();
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

const FORMAT_KEY = Buffer.from('m:format');
const SCHEDULE_PREFIX = 's'.charCodeAt(0);
const u64 = (value: number): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(value));
  return b;
};
/** Every key and value of a closed store, in hex, but the random identity (test/stores/level/level-identity.test.ts checks it). */
const dump = (path: string) =>
  withRaw(path, async (db) =>
    (await db.iterator().all())
      .filter(([k]) => k.toString() !== 'm:storeId')
      .map(([k, v]): [string, string] => [k.toString('hex'), v.toString('hex')]),
  );

runSchedulingSuite({
  name: 'LevelStore',
  distModule: 'stores/level/index.js',
  className: 'LevelStore',
  open: (path) => LevelStore.open(path),
  pathIn: (dir) => join(dir, 'queue'),
  format: (path) => withRaw(path, async (db) => Number((await db.get(FORMAT_KEY))!.readBigUInt64BE(0))),
  setFormat: (path, format) => withRaw(path, (db) => db.put(FORMAT_KEY, u64(format))),
  scheduleEntries: (path) =>
    withRaw(path, async (db) =>
      (await db.iterator().all()).filter(([k]) => k[0] === SCHEDULE_PREFIX).map(([k]) => Number(k.readBigUInt64BE(1))),
    ),
  snapshot: dump,
});

async function withPath(fn: (path: string) => Promise<void>): Promise<void> {
  const dir = freshDir('pq-level-sched-');
  try {
    await fn(join(dir, 'queue'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const hex = (text: string): string => Buffer.from(text).toString('hex');

/** The keys and values of the example in FORMAT.md §11.3, as `[key, value]` in hex. */
function formatDocExample(): [string, string][] {
  const doc = readFileSync(new URL('../../../FORMAT.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('### 11.3'), doc.indexOf('### 11.4'));
  const start = section.indexOf('```text\n') + '```text\n'.length;
  const lines = section.slice(start, section.indexOf('```', start)).trim().split('\n');
  return lines.map((line) => {
    const [key, value] = line.split('|').map((part) => part.trim());
    return [key!, value!];
  });
}

test('LevelStore: a scheduled item has a key `s` + seq holding its priority (1 signed byte) and not-before time (8 bytes); a plain item has none (the example of FORMAT.md §11.3)', () =>
  withPath(async (path) => {
    const store = await LevelStore.open(path);
    await store.open();
    await store.append(
      [
        { seq: 1, bytes: bytes('a') },
        { seq: 2, bytes: bytes('b'), priority: -128, notBefore: 9_007_199_254_740_991 },
        { seq: 3, bytes: bytes('c'), priority: 127 },
        { seq: 4, bytes: bytes('d'), notBefore: 1_700_000_000_000 },
      ],
      true,
    );
    await store.close();
    expect(await dump(path)).toEqual(formatDocExample());
  }));

test('LevelStore: a damaged schedule value reads as ERR_CORRUPT, never as another priority', () =>
  withPath(async (path) => {
    let store = await LevelStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a'), priority: 3 }], true);
    await store.close();
    for (const value of ['03', '03' + '0000000000000000' + '00', '03' + '0020000000000000']) {
      await withRaw(path, (db) => db.put(Buffer.from('730000000000000001', 'hex'), Buffer.from(value, 'hex')));
      store = await LevelStore.open(path);
      await store.open();
      await expect(store.read({ after: 0, before: 10, limit: 10 })).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
      await store.close();
    }
  }));

test('LevelStore: a refused scheduled append leaves a format-1 store at format 1 without schedule keys', () =>
  withPath(async (path) => {
    const store = await LevelStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await expect(
      store.append(
        [
          { seq: 2, bytes: bytes('b'), priority: 5 },
          { seq: 3, bytes: bytes('c'), notBefore: -5 },
        ],
        true,
      ),
    ).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    // The store did not count the refused item as scheduled: a plain read and ack still work.
    expect((await store.read({ after: 0, before: 10, limit: 10 })).map((i) => i.seq)).toEqual([1]);
    await store.close();
    expect(await dump(path)).toEqual([
      ['690000000000000001', hex('a')],
      [hex('m:format'), '0000000000000001'],
      [hex('m:nextSeq'), '0000000000000002'],
    ]);
  }));

test('LevelStore: the first delivery record and the first scheduled item in flight together leave format 3, whichever batch lands first', () =>
  withPath(async (path) => {
    // Twenty rounds: LevelDB may apply the two batches in either order.
    for (let round = 0; round < 20; round++) {
      rmSync(path, { recursive: true, force: true });
      const store = await LevelStore.open(path);
      await store.open();
      await store.append([{ seq: 1, bytes: bytes('a') }], true);
      // Not awaited one by one: the bound raises the format to 2, the scheduled item to 3.
      await Promise.all([
        store.markDelivered(2, [], false),
        store.append([{ seq: 2, bytes: bytes('b'), priority: 1 }], false),
        store.markDelivered(3, [], false),
      ]);
      await store.close();
      const keys = new Map(await dump(path));
      expect(keys.get(hex('m:format')), `round ${round}`).toBe('0000000000000003');
    }
  }));

test('LevelStore: a read that overlaps acks of scheduled items returns every item it returns with its schedule', () =>
  withPath(async (path) => {
    const store = await LevelStore.open(path);
    await store.open();
    const count = 200;
    await store.append(
      Array.from({ length: count }, (_, i) => ({ seq: i + 1, bytes: bytes(`p${i + 1}`), priority: (i % 100) + 1 })),
      true,
    );
    const reads: Promise<readonly { seq: number; priority?: number }[]>[] = [];
    const acks: Promise<void>[] = [];
    for (let seq = 1; seq <= count; seq += 10) {
      reads.push(store.read({ after: 0, before: count + 1, limit: count }));
      acks.push(
        store.ack(
          Array.from({ length: 10 }, (_, i) => seq + i),
          false,
        ),
      );
    }
    await Promise.all(acks);
    for (const items of await Promise.all(reads)) {
      for (const item of items) expect(item.priority, `seq ${item.seq}`).toBe(((item.seq - 1) % 100) + 1);
    }
    expect(await store.read({ after: 0, before: count + 1, limit: count })).toEqual([]);
    await store.close();
    expect((await dump(path)).filter(([k]) => k.startsWith('73'))).toEqual([]);
  }));

/** A batch writer whose batches land only when the test says so, in the order it chooses. */
function heldWrites(): {
  write: (ops: BatchOp[], sync: boolean) => Promise<void>;
  started: BatchOp[][];
  land: (index: number) => Promise<void>;
} {
  const started: BatchOp[][] = [];
  const landers: (() => void)[] = [];
  return {
    started,
    write: (ops) =>
      new Promise<void>((resolve) => {
        started.push(ops);
        landers.push(resolve);
      }),
    // Resolves after the continuations of the landed batch have run.
    land: async (index) => {
      landers[index]!();
      for (let turn = 0; turn < 5; turn++) await Promise.resolve();
    },
  };
}
const formatOf = (ops: BatchOp[]): number | undefined => {
  const put = ops.find((op) => op.type === 'put' && op.key.toString() === 'm:format');
  return put?.type === 'put' ? Number(Buffer.from(put.value).readBigUInt64BE(0)) : undefined;
};

test('LevelStore format raise: a raise to 3 is not handed to LevelDB while the raise to 2 before it is in flight', async () => {
  const held = heldWrites();
  const raise = new FormatRaise(1, held.write);
  const two = raise.write([], false, 2);
  const three = raise.write([], false, 3);
  await Promise.resolve();
  expect(held.started.map(formatOf)).toEqual([2]);
  await held.land(0);
  expect(raise.format).toBe(2);
  expect(held.started.map(formatOf)).toEqual([2, 3]);
  await held.land(1);
  await Promise.all([two, three]);
  expect(raise.format).toBe(3);
});

test('LevelStore format raise: a batch that relies on a raise in flight waits for it; later batches and lower formats write at once and put no m:format', async () => {
  const held = heldWrites();
  const raise = new FormatRaise(1, held.write);
  const first = raise.write([], false, 3);
  const relying = raise.write([], false, 3);
  const lower = raise.write([], false, 2);
  await Promise.resolve();
  // Only the raise is out: the two others rely on it (format 2 is part of 3).
  expect(held.started.map(formatOf)).toEqual([3]);
  await held.land(0);
  expect(held.started.map(formatOf)).toEqual([3, undefined, undefined]);
  await held.land(1);
  await held.land(2);
  await Promise.all([first, relying, lower]);
  // Once it has landed, nothing waits and nothing puts m:format again.
  const after = raise.write([], true, 3);
  expect(held.started.map(formatOf)).toEqual([3, undefined, undefined, undefined]);
  await held.land(3);
  await after;
});

test('LevelStore: an m:format of 0 names no format and is refused with ERR_CORRUPT, nothing written', () =>
  withPath(async (path) => {
    const store = await LevelStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await store.close();
    await withRaw(path, (db) => db.put(FORMAT_KEY, u64(0)));
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
    expect(await dump(path)).toEqual(before);
  }));

test.each([
  ['the prefix alone', '73'],
  ['2 bytes', '7300'],
  ['10 bytes', '73000000000000000100'],
])('LevelStore: an `s` key of %s, not 9, is refused with ERR_CORRUPT at open, nothing written', (_what, key) =>
  withPath(async (path) => {
    const store = await LevelStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a'), priority: 3 }], true);
    await store.close();
    await withRaw(path, async (db) => {
      await db.put(Buffer.from(key, 'hex'), Buffer.from('030000000000000000', 'hex'));
      // A mark of an item that is gone, which an open that passes its checks deletes.
      await db.put(Buffer.from('630000000000000009', 'hex'), Buffer.alloc(24));
    });
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
    expect(await dump(path)).toEqual(before);
  }),
);

const KEY_PREFIX = 'k'.charCodeAt(0);
const keyOf = (seq: number): Buffer => Buffer.concat([Buffer.from([KEY_PREFIX]), u64(seq)]);

runKeySuite({
  name: 'LevelStore',
  open: (path) => LevelStore.open(path),
  pathIn: (dir) => join(dir, 'queue'),
  format: (path) => withRaw(path, async (db) => Number((await db.get(FORMAT_KEY))!.readBigUInt64BE(0))),
  setFormat: (path, format) => withRaw(path, (db) => db.put(FORMAT_KEY, u64(format))),
  keyEntries: (path) =>
    withRaw(path, async (db) =>
      (await db.iterator().all()).filter(([k]) => k[0] === KEY_PREFIX).map(([k]) => Number(k.readBigUInt64BE(1))),
    ),
  // Its time alone: no byte of key.
  damageKey: (path, seq) => withRaw(path, (db) => db.put(keyOf(seq), u64(5))),
  snapshot: dump,
});

test('LevelStore: a key entry is `k` + seq holding the time and the key, as FORMAT.md §11.5 shows', () =>
  withPath(async (path) => {
    const store = await LevelStore.open(path);
    await store.open();
    await store.append(
      [
        { seq: 1, bytes: bytes('a') },
        { seq: 2, bytes: bytes('b'), key: 'ord-1', keyedAt: 1700000000000 },
      ],
      true,
    );
    await store.close();
    const doc = readFileSync(new URL('../../../FORMAT.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('### 11.5'));
    const block = section.slice(section.indexOf('```text\n') + 8, section.indexOf('```', section.indexOf('```text\n') + 8));
    const want = block
      .trim()
      .split('\n')
      .map(
        (line) =>
          line
            .split('|')
            .slice(0, 2)
            .map((s) => s.trim()) as [string, string],
      );
    expect(await dump(path)).toEqual(want);
  }));
