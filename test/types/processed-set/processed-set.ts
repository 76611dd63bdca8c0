// Compile-time checks of the processed-set API: `npx tsc -p test/types/processed-set` must pass,
// and each `@ts-expect-error` line must be an error. Checked by test/once/processed-set-types.test.ts;
// this file is never run.
import {
  Builder,
  LogProcessedSet,
  MemStore,
  type EffectivelyOnce,
  type ProcessedSet,
  type Reserved,
  effectivelyOnce,
  json,
} from 'persistent-queue';
// The subpath is the built package's; the source is checked here so that no build is needed.
import { SqliteProcessedSet } from '../../../src/stores/sqlite/index.js';

type Equal<A, B> = (<X>() => X extends A ? 1 : 2) extends <X>() => X extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(_: T): void {}

interface Order {
  id: number;
}

declare const db: { exec(sql: string): unknown; prepare(sql: string): { run(...p: unknown[]): unknown; get(...p: unknown[]): unknown } };

export async function processedSets(): Promise<void> {
  const [, rx] = await new Builder(new MemStore()).codec(json<Order>()).open();

  // Any set, asynchronous handler: the item is typed by the queue.
  const logSet = await LogProcessedSet.open('/tmp/set');
  const once = effectivelyOnce(rx, logSet, async (item, context) => {
    const id: number = item.value.id;
    context?.signal.throwIfAborted();
    await Promise.resolve(id);
  });
  assertType<Equal<typeof once, EffectivelyOnce<Order>>>(true);
  await rx.process(once);
  for await (const item of rx) {
    const ran: boolean = await once(item);
    void ran;
  }
  // @ts-expect-error no such field on an Order
  effectivelyOnce(rx, logSet, (item) => item.value.sku);

  // A set of your own.
  const mine: ProcessedSet = { has: () => false, record: async () => {}, forget: () => {} };
  effectivelyOnce(rx, mine, (item: Reserved<Order>) => item.value.id);

  // SQLite: the handler runs inside a synchronous transaction.
  const sqlite = new SqliteProcessedSet(db);
  effectivelyOnce(rx, sqlite, (item) => {
    const id: number = item.value.id;
    void id;
  });
  // @ts-expect-error an async handler cannot run inside a better-sqlite3 transaction
  effectivelyOnce(rx, sqlite, async () => {});
  // @ts-expect-error nor can one that returns a promise
  effectivelyOnce(rx, sqlite, () => Promise.resolve());
}
