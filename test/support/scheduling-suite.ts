/**
 * Tests every durable store with `features.scheduling` (SqliteStore, LevelStore) must pass: items'
 * priorities and not-before times kept exactly through reads, reopens and a kill -9 of a real
 * writer; `scheduledFrom`; no schedule entry left behind by an ack or a dead-letter move; bad
 * fields refused; and the format rules (a plain store keeps its older format, the first scheduled
 * item raises it, a newer one is refused). Store-specific layout checks live in each test file.
 */
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { expect, test } from 'vitest';
import { isQueueError } from '../../src/contract/errors.js';
import { isScheduled, PRIORITY_MAX, PRIORITY_MIN, type Store, type StoredItem } from '../../src/contract/store.js';
import { formatSeed, Prng, seedFromEnv, withReproduction } from '../../src/testing/index.js';
import { freshDir } from './backend-suite.js';
import { distUrl, lineWriterSource, runModule } from './child-process.js';

/** A durable store with the delivery calls, which every store here has. */
export type ScheduledStore = Store &
  Required<Pick<Store, 'markDelivered' | 'deadLetter' | 'redrive'>> & {
    readonly path: string;
    close(): Promise<void>;
  };

export interface SchedulingBackend {
  name: string;
  /** File under dist/ that exports the class, and the class's name. */
  distModule: string;
  className: string;
  open(path: string): Promise<ScheduledStore>;
  pathIn(dir: string): string;
  /** The format version a closed store holds. */
  format(path: string): Promise<number>;
  /** Overwrite the format version of a closed store, as a newer release would have written it. */
  setFormat(path: string, format: number): Promise<void>;
  /** The seqs of a closed store's schedule entries (rows or keys), in order. */
  scheduleEntries(path: string): Promise<number[]>;
  /** A byte-for-byte or row-for-row picture of a closed store, to show a refused open changed nothing. */
  snapshot(path: string): Promise<unknown>;
}

const ALL = { after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 };
const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
/** An item as compared in these tests: the payload as text, the fields that are 0 left out. */
const plain = (item: StoredItem): { seq: number; text: string; priority?: number; notBefore?: number } => ({
  seq: item.seq,
  text: new TextDecoder().decode(item.bytes),
  ...(item.priority !== undefined && item.priority !== 0 ? { priority: item.priority } : {}),
  ...(item.notBefore !== undefined && item.notBefore !== 0 ? { notBefore: item.notBefore } : {}),
});
const refused = (p: Promise<unknown>) => expect(p).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_STORE'));

/** A far-future not-before time and its neighbours, to show that all 8 bytes are kept. */
const LATE = Number.MAX_SAFE_INTEGER;
const SOON = 1_700_000_000_123;

/** Items 1..8: plain, priority only, not-before only, both, at the edges of each range. */
function mixedBatch(): StoredItem[] {
  return [
    { seq: 1, bytes: bytes('plain') },
    { seq: 2, bytes: bytes('high'), priority: PRIORITY_MAX },
    { seq: 3, bytes: bytes('low'), priority: PRIORITY_MIN },
    { seq: 4, bytes: bytes('later'), notBefore: SOON },
    { seq: 5, bytes: bytes('both'), priority: -1, notBefore: LATE },
    { seq: 6, bytes: bytes('zeros'), priority: 0, notBefore: 0 },
    { seq: 7, bytes: bytes(''), priority: 1, notBefore: 1 },
    { seq: 8, bytes: bytes('plain again') },
  ];
}

export function runSchedulingSuite(b: SchedulingBackend): void {
  const prefix = `pq-${b.name.toLowerCase()}-sched-`;
  const withStore = async (fn: (path: string) => Promise<void>): Promise<void> => {
    const dir = freshDir(prefix);
    try {
      await fn(b.pathIn(dir));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  test(`${b.name}: features.scheduling is true`, () =>
    withStore(async (path) => {
      const store = await b.open(path);
      expect(store.features.scheduling).toBe(true);
      await store.close();
    }));

  test(`${b.name}: priorities and not-before times read back exactly, in every range and after reopen`, () =>
    withStore(async (path) => {
      const batch = mixedBatch();
      let store = await b.open(path);
      expect((await store.open()).scheduledFrom).toBe(1);
      await store.append(batch, true);
      const expected = batch.map(plain);
      expect((await store.read(ALL)).map(plain)).toEqual(expected);
      // Ranges that start, end and stop (by limit) among scheduled items.
      expect((await store.read({ after: 2, before: 6, limit: 10 })).map(plain)).toEqual(expected.slice(2, 5));
      expect((await store.read({ after: 0, before: 9, limit: 3 })).map(plain)).toEqual(expected.slice(0, 3));
      expect((await store.read({ after: 4, before: 9, limit: 1 })).map(plain)).toEqual(expected.slice(4, 5));
      // The fields that are 0 are left out: a plain item reads back as `{ seq, bytes }`.
      const read = await store.read(ALL);
      expect(Object.keys(read[0]!).sort()).toEqual(['bytes', 'seq']);
      expect(Object.keys(read[5]!).sort()).toEqual(['bytes', 'seq']);
      expect(Object.keys(read[1]!).sort()).toEqual(['bytes', 'priority', 'seq']);
      expect(Object.keys(read[3]!).sort()).toEqual(['bytes', 'notBefore', 'seq']);
      await store.close();

      store = await b.open(path);
      const r = await store.open();
      expect([r.nextSeq, r.count, r.scheduledFrom]).toEqual([9, 8, 2]);
      expect((await store.read(ALL)).map(plain)).toEqual(expected);
      await store.close();
    }));

  test(`${b.name}: scheduledFrom is nextSeq without scheduled items and the lowest unacked scheduled seq with them`, () =>
    withStore(async (path) => {
      let store = await b.open(path);
      await store.open();
      await store.append(
        [1, 2, 3, 4].map((seq) => ({ seq, bytes: bytes(`p${seq}`) })),
        true,
      );
      await store.ack([2], true);
      await store.close();
      store = await b.open(path);
      expect((await store.open()).scheduledFrom).toBe(5);
      await store.append(
        [
          { seq: 5, bytes: bytes('a') },
          { seq: 6, bytes: bytes('s6'), priority: 3 },
          { seq: 7, bytes: bytes('b') },
          { seq: 8, bytes: bytes('s8'), notBefore: SOON },
        ],
        true,
      );
      await store.close();
      store = await b.open(path);
      let r = await store.open();
      expect(r.scheduledFrom).toBe(6);
      // Acking the lowest scheduled item moves scheduledFrom to the next one.
      await store.ack([6, 1], true);
      await store.close();
      store = await b.open(path);
      r = await store.open();
      expect(r.scheduledFrom).toBe(8);
      await store.ack([8], false);
      await store.close();
      store = await b.open(path);
      r = await store.open();
      expect([r.scheduledFrom, r.nextSeq, r.count]).toEqual([9, 9, 4]);
      expect((await store.read(ALL)).map(plain)).toEqual(
        [3, 4, 5, 7].map((seq) =>
          plain(seq === 5 ? { seq, bytes: bytes('a') } : seq === 7 ? { seq, bytes: bytes('b') } : { seq, bytes: bytes(`p${seq}`) }),
        ),
      );
      await store.close();
      expect(await b.scheduleEntries(path)).toEqual([]);
    }));

  test(`${b.name}: acked and dead-lettered scheduled items leave no schedule entry; a redriven item has none`, () =>
    withStore(async (path) => {
      let store = await b.open(path);
      await store.open();
      await store.append(mixedBatch(), true);
      await store.close();
      expect(await b.scheduleEntries(path)).toEqual([2, 3, 4, 5, 7]);
      store = await b.open(path);
      await store.open();
      await store.ack([2, 1, 7], true);
      await store.deadLetter([
        { seq: 5, bytes: bytes('both'), deliveries: 1, firstDeliveredAt: 1, lastDeliveredAt: 2, deadAt: 3, reason: 'poison' },
      ]);
      await store.close();
      expect(await b.scheduleEntries(path)).toEqual([3, 4]);
      store = await b.open(path);
      expect((await store.open()).scheduledFrom).toBe(3);
      await store.redrive([{ from: 5, item: { seq: 9, bytes: bytes('both') } }], true);
      expect((await store.read({ after: 8, before: 10, limit: 10 })).map(plain)).toEqual([{ seq: 9, text: 'both' }]);
      await store.close();
      expect(await b.scheduleEntries(path)).toEqual([3, 4]);
    }));

  test(`${b.name}: a bad priority or not-before time is refused with ERR_STORE and stores nothing of the batch`, () =>
    withStore(async (path) => {
      let store = await b.open(path);
      const { nextSeq } = await store.open();
      const bad: Partial<StoredItem>[] = [
        { priority: PRIORITY_MAX + 1 },
        { priority: PRIORITY_MIN - 1 },
        { priority: 1.5 },
        { priority: Number.NaN },
        { priority: '1' as unknown as number },
        { notBefore: -1 },
        { notBefore: 2.5 },
        { notBefore: Number.MAX_SAFE_INTEGER + 1 },
        { notBefore: Number.POSITIVE_INFINITY },
      ];
      for (const fields of bad) {
        await refused(
          store.append(
            [
              { seq: nextSeq, bytes: bytes('ok'), priority: 2 },
              { seq: nextSeq + 1, bytes: bytes('bad'), ...fields },
            ],
            true,
          ),
        );
      }
      // A dead letter cannot come back scheduled: redriven items have no schedule.
      await store.append([{ seq: nextSeq, bytes: bytes('x') }], true);
      await store.deadLetter([
        { seq: nextSeq, bytes: bytes('x'), deliveries: 1, firstDeliveredAt: 1, lastDeliveredAt: 1, deadAt: 1, reason: '' },
      ]);
      await refused(store.redrive([{ from: nextSeq, item: { seq: nextSeq + 1, bytes: bytes('x'), priority: 4 } }], true));
      expect(await store.read(ALL)).toEqual([]);
      await store.close();
      expect(await b.scheduleEntries(path)).toEqual([]);
      store = await b.open(path);
      const r = await store.open();
      expect([r.nextSeq, r.count, r.deadLetters, r.scheduledFrom]).toEqual([nextSeq + 1, 0, 1, nextSeq + 1]);
      await store.close();
    }));

  test(`${b.name}: a store that never holds a scheduled item keeps its format; the first one raises it to 3`, () =>
    withStore(async (path) => {
      let store = await b.open(path);
      await store.open();
      await store.append(
        [
          { seq: 1, bytes: bytes('a') },
          { seq: 2, bytes: bytes('b'), priority: 0, notBefore: 0 },
        ],
        true,
      );
      await store.close();
      expect(await b.format(path)).toBe(1);
      store = await b.open(path);
      await store.open();
      await store.markDelivered(2, [], true);
      await store.close();
      expect(await b.format(path)).toBe(2);
      store = await b.open(path);
      await store.open();
      await store.append([{ seq: 3, bytes: bytes('c'), notBefore: SOON }], false);
      await store.close();
      expect(await b.format(path)).toBe(3);
      store = await b.open(path);
      const r = await store.open();
      expect([r.deliveredBelow, r.scheduledFrom]).toEqual([2, 3]);
      expect((await store.read(ALL)).map(plain)).toEqual([
        { seq: 1, text: 'a' },
        { seq: 2, text: 'b' },
        { seq: 3, text: 'c', notBefore: SOON },
      ]);
      await store.close();
    }));

  test(`${b.name}: a format-1 store goes to format 3 with its first scheduled item, and delivery state works there`, () =>
    withStore(async (path) => {
      let store = await b.open(path);
      await store.open();
      await store.append(
        [
          { seq: 1, bytes: bytes('a'), priority: 9 },
          { seq: 2, bytes: bytes('b') },
        ],
        true,
      );
      await store.close();
      expect(await b.format(path)).toBe(3);
      store = await b.open(path);
      let r = await store.open();
      expect([r.deliveredBelow, r.marks, r.deadLetters, r.scheduledFrom]).toEqual([1, [], 0, 1]);
      const mark = { seq: 1, deliveries: 2, firstDeliveredAt: 5, lastDeliveredAt: 6, lastError: 'e' };
      await store.markDelivered(3, [mark], true);
      await store.deadLetter([
        { seq: 2, bytes: bytes('b'), deliveries: 1, firstDeliveredAt: 1, lastDeliveredAt: 1, deadAt: 1, reason: 'r' },
      ]);
      await store.close();
      expect(await b.format(path)).toBe(3);
      store = await b.open(path);
      r = await store.open();
      expect([r.deliveredBelow, r.marks, r.deadLetters, r.scheduledFrom]).toEqual([3, [mark], 1, 1]);
      expect((await store.read(ALL)).map(plain)).toEqual([{ seq: 1, text: 'a', priority: 9 }]);
      await store.close();
    }));

  test(`${b.name}: a format-3 store is refused with ERR_UNSUPPORTED_VERSION at format 5 (format 4 holds keys) and left unchanged`, () =>
    withStore(async (path) => {
      const store = await b.open(path);
      await store.open();
      await store.append([{ seq: 1, bytes: bytes('a'), priority: 1 }], true);
      await store.close();
      expect(await b.format(path)).toBe(3);
      await b.setFormat(path, 5);
      const before = await b.snapshot(path);
      await expect(b.open(path)).rejects.toSatisfy((e: unknown) => isQueueError(e, 'ERR_UNSUPPORTED_VERSION'));
      expect(await b.snapshot(path)).toEqual(before);
    }));

  test(`${b.name}: seeded appends, acks, dead-letter moves and reopens keep every item's schedule (model check)`, () =>
    withStore(async (path) => {
      const seed = seedFromEnv(0x5c4ed01e);
      const rng = new Prng(seed);
      const model = new Map<number, StoredItem>();
      let step = 0;
      await withReproduction(
        () =>
          `SEED=${formatSeed(seed)} npx vitest run test/${b.name === 'SqliteStore' ? 'sqlite' : 'level'}-scheduling.test.ts -t "model check" (step ${step})`,
        async () => {
          let store = await b.open(path);
          let { nextSeq } = await store.open();
          for (step = 0; step < 120; step++) {
            const roll = rng.int(10);
            if (roll < 5) {
              const batch: StoredItem[] = [];
              for (let n = rng.intBetween(1, 6); n > 0; n--) {
                const seq = nextSeq++;
                const fields = rng.pick(['plain', 'priority', 'notBefore', 'both'] as const);
                const priority =
                  fields === 'priority' || fields === 'both' ? PRIORITY_MIN + rng.int(PRIORITY_MAX - PRIORITY_MIN + 1) : undefined;
                // Any safe integer: 32 random bits above 21 more reach 2^53 - 1.
                const notBefore = fields === 'notBefore' || fields === 'both' ? rng.next() * 2 ** 21 + rng.int(2 ** 21) : undefined;
                batch.push({
                  seq,
                  bytes: rng.bytes(rng.int(5)),
                  ...(priority === undefined ? {} : { priority }),
                  ...(notBefore === undefined ? {} : { notBefore }),
                });
              }
              await store.append(batch, rng.bool());
              for (const item of batch) model.set(item.seq, item);
            } else if (roll < 8 && model.size > 0) {
              const held = [...model.keys()];
              const acked = [...new Set(Array.from({ length: rng.intBetween(1, 4) }, () => rng.pick(held)))];
              await store.ack(acked, rng.bool());
              for (const seq of acked) model.delete(seq);
            } else if (roll === 8 && model.size > 0) {
              const item = model.get(rng.pick([...model.keys()]))!;
              await store.deadLetter([
                { seq: item.seq, bytes: item.bytes, deliveries: 1, firstDeliveredAt: 1, lastDeliveredAt: 1, deadAt: 1, reason: '' },
              ]);
              model.delete(item.seq);
            } else {
              await store.close();
              store = await b.open(path);
              const r = await store.open();
              const lowest = [...model.values()]
                .filter(isScheduled)
                .map((i) => i.seq)
                .sort((x, y) => x - y)[0];
              expect(r.scheduledFrom).toBe(lowest ?? r.nextSeq);
              nextSeq = r.nextSeq;
            }
            const held = [...model.values()].sort((x, y) => x.seq - y.seq).map(plain);
            expect((await store.read(ALL)).map(plain)).toEqual(held);
          }
          await store.close();
          expect(await b.scheduleEntries(path)).toEqual(
            [...model.values()]
              .filter(isScheduled)
              .map((i) => i.seq)
              .sort((x, y) => x - y),
          );
        },
      );
    }));

  test(`${b.name}: every scheduled item appended under sync survives kill -9 of the writer with its fields`, () =>
    withStore(async (path) => {
      const writer = runModule(
        dirname(path),
        'sched-writer.mjs',
        `import { ${b.className} } from ${JSON.stringify(distUrl(b.distModule))};
${lineWriterSource}
const store = await ${b.className}.open(process.argv[2]);
let { nextSeq: seq } = await store.open();
const bytes = (s) => new TextEncoder().encode(s);
for (let n = 0; ; n++) {
  // An unsynced batch, then a synced one, then an ack of the first plain item of the pair.
  const a = { seq, bytes: bytes('a' + seq), priority: (n % 255) - 127 };
  const b = { seq: seq + 1, bytes: bytes('b' + seq), notBefore: 1_700_000_000_000 + n };
  await store.append([a], false);
  await store.append([b, { seq: seq + 2, bytes: bytes('p' + seq) }], true);
  out(String(seq)); // in the pipe when it returns: the kill may come right after
  if (n % 3 === 0) await store.ack([seq + 2], false);
  seq += 3;
}
`,
        [path],
      );
      try {
        await writer.until((lines) => lines.length >= 150);
      } finally {
        await writer.kill();
      }
      const written = writer.lines.filter((l) => /^\d+$/.test(l)).map(Number);
      const store = await b.open(path);
      const r = await store.open();
      const bySeq = new Map((await store.read(ALL)).map((i) => [i.seq, i]));
      const wrong = written.filter((seq, n) => {
        const a = bySeq.get(seq);
        const later = bySeq.get(seq + 1);
        return (
          a === undefined ||
          a.priority !== ((n % 255) - 127 || undefined) ||
          a.notBefore !== undefined ||
          later?.notBefore !== 1_700_000_000_000 + n ||
          later.priority !== undefined
        );
      });
      expect(wrong, 'scheduled items reported written and then missing or changed after kill -9').toEqual([]);
      expect(r.scheduledFrom).toBe(written[0]);
      await store.close();
    }));
}
