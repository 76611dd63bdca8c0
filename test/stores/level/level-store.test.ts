import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../../../src/contract/errors.js';
import { Builder } from '../../../src/core/builder.js';
import { LEVEL_FORMAT_VERSION, LevelStore } from '../../../src/stores/level/index.js';
import type { DeadLetter } from '../../../src/contract/store.js';
import { freshDir, runBackendSuite } from '../../support/backend-suite.js';
import { distUrl, lineWriterSource, runModule } from '../../support/child-process.js';

runBackendSuite({
  name: 'LevelStore',
  distModule: 'stores/level/index.js',
  className: 'LevelStore',
  peer: 'classic-level',
  peerOptions: 'undefined',
  open: (path, options) => LevelStore.open(path, options),
  pathIn: (dir) => join(dir, 'queue'),
});

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = freshDir('pq-level-');
  try {
    await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Keys and values of a closed LevelDB directory, read with classic-level directly. */
async function dump(path: string): Promise<[string, string][]> {
  const { ClassicLevel } = await import('classic-level');
  const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer', createIfMissing: false });
  await db.open();
  try {
    // The identity (`m:storeId`) is random: it has a test of its own (test/stores/level/level-identity.test.ts).
    return (await db.iterator().all())
      .filter(([k]) => k.toString() !== 'm:storeId')
      .map(([k, v]) => [k.toString('hex'), v.toString('hex')]);
  } finally {
    await db.close();
  }
}

test('LevelStore: keys are `i` + big-endian seq, `m:nextSeq` holds the next seq, `m:deliveredBelow` the bound, the directory is 0o700', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    const store = await LevelStore.open(path);
    const [tx, rx] = await new Builder(store).open();
    await tx.pushMany(['a', 'b', 'c']);
    await (await rx.reserve())!.ack();
    await tx.close();
    if (process.platform !== 'win32') expect(statSync(path).mode & 0o777).toBe(0o700);
    expect(await dump(path)).toEqual([
      ['690000000000000002', Buffer.from('b').toString('hex')],
      ['690000000000000003', Buffer.from('c').toString('hex')],
      // The queue's first-delivery bound, stored exactly at close: seq 1 was handed out.
      [Buffer.from('m:deliveredBelow').toString('hex'), '0000000000000002'],
      [Buffer.from('m:format').toString('hex'), '0000000000000002'],
      [Buffer.from('m:nextSeq').toString('hex'), '0000000000000004'],
    ]);
  }));

test('LevelStore: a non-empty directory that is not LevelDB is refused with ERR_STORE and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'photos');
    mkdirSync(path);
    writeFileSync(join(path, 'cat.jpg'), 'meow');
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(readdirSync(path)).toEqual(['cat.jpg']);
    expect(readFileSync(join(path, 'cat.jpg'), 'utf8')).toBe('meow');
  }));

test('LevelStore: a path that is a file is refused with ERR_STORE', () =>
  withDir(async (dir) => {
    writeFileSync(join(dir, 'file'), 'x');
    await expect(LevelStore.open(join(dir, 'file'))).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
  }));

test('LevelStore: a LevelDB database that is not a queue is refused with ERR_STORE and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'other');
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel(path);
    await db.put('name', 'someone else');
    await db.close();
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));
    expect(await dump(path)).toEqual(before);
  }));

test('LevelStore: a store written by a newer format is refused with ERR_UNSUPPORTED_VERSION and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    await (await LevelStore.open(path)).close();
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.put(Buffer.from('m:format'), Buffer.from('0000000000000005', 'hex'));
    await db.close();
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
    expect(await dump(path)).toEqual(before);
  }));

test('LevelStore: read is asynchronous and returns at most `limit` items', () =>
  withDir(async (dir) => {
    const store = await LevelStore.open(join(dir, 'queue'));
    const { nextSeq: s } = await store.open();
    await store.append(
      Array.from({ length: 10 }, (_, i) => ({ seq: s + i, bytes: new Uint8Array([i]) })),
      false,
    );
    const pending = store.read({ after: s, before: s + 8, limit: 3 });
    expect(pending).toBeInstanceOf(Promise);
    expect((await pending).map((i) => i.seq)).toEqual([s + 1, s + 2, s + 3]);
    await store.close();
  }));

const hex = (text: string): string => Buffer.from(text).toString('hex');

/** The `m:format` value of a closed store and the prefixes of its other keys. */
async function layout(path: string): Promise<{ format: string | undefined; prefixes: string[] }> {
  const keys = await dump(path);
  const format = keys.find(([k]) => k === hex('m:format'))?.[1];
  const prefixes = [
    ...new Set(keys.filter(([k]) => !k.startsWith(hex('m:'))).map(([k]) => Buffer.from(k.slice(0, 2), 'hex').toString())),
  ].sort();
  const meta = keys.filter(([k]) => k.startsWith(hex('m:'))).map(([k]) => Buffer.from(k, 'hex').toString());
  return { format, prefixes: [...prefixes, ...meta] };
}

const V1 = '0000000000000001';
const V2 = '0000000000000002';
const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const dead = (seq: number, text: string, reason: string): DeadLetter => ({
  seq,
  bytes: bytes(text),
  deliveries: 5,
  firstDeliveredAt: 1_700_000_000_001,
  lastDeliveredAt: 1_700_000_000_002,
  deadAt: 1_700_000_000_003,
  reason,
});
const plain = (d: DeadLetter) => ({ ...d, bytes: new TextDecoder().decode(d.bytes) });
const refused = (p: Promise<unknown>) => expect(p).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));

test('LevelStore: a store that never keeps delivery state stays at format 1 and works; the first dead letter makes it format 2', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    expect(LEVEL_FORMAT_VERSION).toBe(4);
    // Written through the format-1 calls only: appends, acks, reads, a close; no delivery state.
    let store = await LevelStore.open(path);
    await store.open();
    await store.append(
      [1, 2, 3].map((seq) => ({ seq, bytes: bytes('abc'[seq - 1]!) })),
      true,
    );
    expect((await store.read({ after: 0, before: 4, limit: 10 })).length).toBe(3);
    await store.ack([1], true);
    await store.close();
    expect(await layout(path)).toEqual({ format: V1, prefixes: ['i', 'm:format', 'm:nextSeq'] });

    store = await LevelStore.open(path);
    let r = await store.open();
    expect(r).toEqual({
      nextSeq: 4,
      count: 2,
      deliveredBelow: 1,
      marks: [],
      deadLetters: 0,
      scheduledFrom: 4,
      storeId: expect.any(String),
      keys: [],
    });
    expect(await store.readDeadLetters({ after: 0, limit: 10 })).toEqual([]);
    await store.append([{ seq: 4, bytes: bytes('d') }], true);
    await store.ack([2], true);
    // Nothing new to store: the bound every format-1 store has, and no marks.
    await store.markDelivered(1, [], true);
    // Contract violations on a format-1 store are refused and write nothing.
    await refused(store.dropDeadLetters([3], true));
    await refused(store.redrive([{ from: 3, item: { seq: 5, bytes: bytes('c') } }], true));
    await refused(store.deadLetter([dead(9, 'x', 'not held')]));
    await refused(store.markDelivered(5, [{ seq: 9, deliveries: 2, firstDeliveredAt: 0, lastDeliveredAt: 0, lastError: '' }], true));
    await store.close();
    expect(await layout(path)).toEqual({ format: V1, prefixes: ['i', 'm:format', 'm:nextSeq'] });

    store = await LevelStore.open(path);
    r = await store.open();
    expect([r.nextSeq, r.count]).toEqual([5, 2]);
    await store.deadLetter([dead(3, 'c', 'poison')]);
    await store.close();
    expect(await layout(path)).toEqual({ format: V2, prefixes: ['d', 'i', 'm:format', 'm:nextSeq'] });

    store = await LevelStore.open(path);
    r = await store.open();
    expect(r).toEqual({
      nextSeq: 5,
      count: 1,
      deliveredBelow: 1,
      marks: [],
      deadLetters: 1,
      scheduledFrom: 5,
      storeId: expect.any(String),
      keys: [],
    });
    expect((await store.readDeadLetters({ after: 0, limit: 10 })).map(plain)).toEqual([plain(dead(3, 'c', 'poison'))]);
    await store.close();
  }));

test('LevelStore: the first delivery mark makes a format-1 store format 2; a refused one leaves it at format 1', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    let store = await LevelStore.open(path);
    await store.open();
    await store.append(
      [
        { seq: 1, bytes: bytes('a') },
        { seq: 2, bytes: bytes('b') },
      ],
      true,
    );
    const mark = { seq: 2, deliveries: 2, firstDeliveredAt: 10, lastDeliveredAt: 20, lastError: 'boom' };
    // One mark of a seq that is not held refuses the whole call, the upgrade with it.
    await refused(store.markDelivered(3, [mark, { ...mark, seq: 7 }], false));
    await store.close();
    expect((await layout(path)).format).toBe(V1);
    store = await LevelStore.open(path);
    await store.open();
    await store.markDelivered(3, [mark], false);
    await store.ack([1], false);
    await store.close();
    expect(await layout(path)).toEqual({ format: V2, prefixes: ['c', 'i', 'm:deliveredBelow', 'm:format', 'm:nextSeq'] });
    store = await LevelStore.open(path);
    expect(await store.open()).toEqual({
      nextSeq: 3,
      count: 1,
      deliveredBelow: 3,
      marks: [mark],
      deadLetters: 0,
      scheduledFrom: 3,
      storeId: expect.any(String),
      keys: [],
    });
    // The ack of a marked item deletes its mark in the same batch.
    await store.ack([2], true);
    await store.close();
    expect((await layout(path)).prefixes).toEqual(['m:deliveredBelow', 'm:format', 'm:nextSeq']);
  }));

test('LevelStore: a mark whose item is gone is not reported and is deleted at open', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    let store = await LevelStore.open(path);
    await store.open();
    await store.append(
      [
        { seq: 1, bytes: bytes('a') },
        { seq: 2, bytes: bytes('b') },
      ],
      true,
    );
    await store.markDelivered(
      3,
      [1, 2].map((seq) => ({ seq, deliveries: 2, firstDeliveredAt: 1, lastDeliveredAt: 2, lastError: '' })),
      true,
    );
    await store.close();
    // As an ack that crossed the mark's write leaves it: the item gone, its mark still there.
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.del(Buffer.from('690000000000000001', 'hex'));
    await db.close();
    store = await LevelStore.open(path);
    expect((await store.open()).marks!.map((m) => m.seq)).toEqual([2]);
    await store.close();
    expect((await dump(path)).filter(([k]) => k.startsWith('63')).map(([k]) => k)).toEqual(['630000000000000002']);
  }));

test('LevelStore: a format-2 store is refused with ERR_UNSUPPORTED_VERSION at format 5 and left unchanged', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    const store = await LevelStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('a') }], true);
    await store.deadLetter([dead(1, 'a', 'poison')]);
    await store.close();
    expect((await layout(path)).format).toBe(V2);
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.put(Buffer.from('m:format'), Buffer.from('0000000000000005', 'hex'));
    await db.close();
    const before = await dump(path);
    await expect(LevelStore.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
    expect(await dump(path)).toEqual(before);
  }));

test('LevelStore: contract violations of the delivery methods reject with ERR_STORE and change nothing', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    const store = await LevelStore.open(path);
    await store.open();
    await store.append(
      [1, 2, 3].map((seq) => ({ seq, bytes: bytes(`p${seq}`) })),
      true,
    );
    await store.deadLetter([dead(1, 'p1', 'first')]);
    await refused(store.deadLetter([dead(2, 'p2', 'ok'), dead(1, 'p1', 'already dead')]));
    await refused(store.deadLetter([dead(2, 'p2', 'ok'), dead(2, 'p2', 'twice')]));
    await refused(store.deadLetter([dead(2, 'p2', 'x'.repeat(1025))]));
    await refused(store.dropDeadLetters([1, 2], true));
    await refused(store.dropDeadLetters([1, 1], true));
    await refused(store.redrive([{ from: 1, item: { seq: 3, bytes: bytes('p1') } }], true));
    await refused(store.redrive([{ from: 2, item: { seq: 4, bytes: bytes('p2') } }], true));
    await refused(store.markDelivered(0, [], true));
    await refused(store.markDelivered(4, [{ seq: 1, deliveries: 2, firstDeliveredAt: 0, lastDeliveredAt: 0, lastError: '' }], true));
    await refused(store.markDelivered(4, [{ seq: 2, deliveries: 0, firstDeliveredAt: 0, lastDeliveredAt: 0, lastError: '' }], true));
    // A drop and a redrive of the same dead letter that overlap: one of them is refused.
    const both = await Promise.allSettled([
      store.dropDeadLetters([1], false),
      store.redrive([{ from: 1, item: { seq: 4, bytes: bytes('p1') } }], false),
    ]);
    expect(both.map((b) => b.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect((await store.read({ after: 0, before: 10, limit: 10 })).map((i) => i.seq)).toEqual(
      both[1].status === 'fulfilled' ? [2, 3, 4] : [2, 3],
    );
    expect(await store.readDeadLetters({ after: 0, limit: 10 })).toEqual([]);
    await store.close();
    const again = await LevelStore.open(path);
    const r = await again.open();
    expect([r.count, r.deadLetters, r.marks, r.deliveredBelow]).toEqual([both[1].status === 'fulfilled' ? 3 : 2, 0, [], 1]);
    await again.close();
  }));

test('LevelStore: a damaged dead letter reads as ERR_CORRUPT, never as other bytes', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    let store = await LevelStore.open(path);
    await store.open();
    await store.append([{ seq: 1, bytes: bytes('payload') }], true);
    await store.deadLetter([dead(1, 'payload', 'why')]);
    await store.close();
    const { ClassicLevel } = await import('classic-level');
    const db = new ClassicLevel<Buffer, Buffer>(path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    const key = Buffer.from('640000000000000001', 'hex');
    const value = (await db.get(key))!;
    value.writeUInt32BE(0xffff, 32); // a reason length past the limit
    await db.put(key, value);
    await db.close();
    store = await LevelStore.open(path);
    await store.open();
    await expect(store.readDeadLetters({ after: 0, limit: 10 })).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_CORRUPT'));
    await store.close();
  }));

test('LevelStore: a dead letter that resolved survives kill -9 of the writer process, even when nothing else is synced', () =>
  withDir(async (dir) => {
    const path = join(dir, 'queue');
    const writer = runModule(
      dir,
      'dead-writer.mjs',
      `import { LevelStore } from ${JSON.stringify(distUrl('stores/level/index.js'))};
${lineWriterSource}
const store = await LevelStore.open(process.argv[2]);
await store.open();
const bytes = (s) => new TextEncoder().encode(s);
for (let seq = 1; ; seq += 2) {
  // Unsynced appends and acks around the synced move: the move alone must survive.
  await store.append([{ seq, bytes: bytes('p' + seq) }, { seq: seq + 1, bytes: bytes('p' + (seq + 1)) }], false);
  await store.deadLetter([{ seq, bytes: bytes('p' + seq), deliveries: 3, firstDeliveredAt: 1, lastDeliveredAt: 2, deadAt: 3, reason: 'r' + seq }]);
  out(String(seq)); // in the pipe when it returns: the kill may come right after
  await store.ack([seq + 1], false);
}
`,
      [path],
    );
    try {
      await writer.until((lines) => lines.length >= 200);
    } finally {
      await writer.kill();
    }
    const moved = writer.lines.filter((l) => /^\d+$/.test(l)).map(Number);
    const store = await LevelStore.open(path);
    const r = await store.open();
    const held = await store.readDeadLetters({ after: 0, limit: 1_000_000 });
    const bySeq = new Map(held.map((d) => [d.seq, d]));
    const missing = moved.filter(
      (seq) => bySeq.get(seq)?.reason !== `r${seq}` || new TextDecoder().decode(bySeq.get(seq)!.bytes) !== `p${seq}`,
    );
    expect(missing, 'dead letters reported moved and missing after kill -9').toEqual([]);
    // Never in both: no dead letter is also still an item.
    const items = new Set((await store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 })).map((i) => i.seq));
    expect(held.filter((d) => items.has(d.seq))).toEqual([]);
    expect(r.deadLetters).toBe(held.length);
    expect(r.nextSeq).toBeGreaterThan(Math.max(...moved) + 1);
    await store.close();
  }));
