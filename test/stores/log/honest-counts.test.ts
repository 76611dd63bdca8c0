/**
 * Delivery counts after an exit the queue did not see coming, in real processes over a LogStore:
 * an item never handed out comes back with no delivery counted (its first real delivery is
 * `deliveries: 1`, and `maxDeliveries` never moves it on a count it did not have), and an item
 * handed out before a crash is still counted. Children import the built package (`npm test`
 * builds it first); every kill is the child's own, so nothing depends on timing.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { distUrl, lineWriterSource } from '../../support/child-process.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';

afterAll(cleanupDirs);

/** Run `body` as an ES module in a child, with `LogStore`, `Builder` and `dir` in scope; its exit and output. */
function child(dir: string, body: string): { status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string } {
  const file = `${freshDir()}-child.mjs`;
  writeFileSync(
    file,
    `const { LogStore, Builder } = await import(${JSON.stringify(distUrl('index.js'))});
${lineWriterSource}
const dir = ${JSON.stringify(dir)};
${body}`,
  );
  const run = spawnSync(process.execPath, [file], { encoding: 'utf8' });
  return { status: run.status, signal: run.signal, stdout: run.stdout, stderr: run.stderr };
}

/** Every item left in the queue, in delivery order, with the count it is handed out with; acked as taken. */
async function drain(dir: string, maxDeliveries: number): Promise<{ items: [string, number][]; deadLetters: string[] }> {
  const [tx, rx] = await new Builder(await LogStore.open(dir)).maxDeliveries(maxDeliveries).open();
  const items: [string, number][] = [];
  for (;;) {
    const item = rx.tryReserve();
    if (item === null) break;
    items.push([dec(item.bytes), item.deliveries]);
    await item.ack();
  }
  await rx.drained();
  const deadLetters = (await rx.deadLetters.list({ limit: 100 })).map((l) => `${dec(l.bytes)}: ${l.reason}`);
  await tx.close();
  return { items, deadLetters };
}

async function fill(dir: string, texts: string[]): Promise<void> {
  const [tx] = await new Builder(await LogStore.open(dir)).open();
  await tx.pushMany(texts);
  await tx.close();
}

describe('delivery counts after an exit without close()', () => {
  it('aProcessThatOpensPushesAndExitsWithoutCloseCountsNoDelivery', async () => {
    const dir = freshDir();
    await fill(dir, ['a', 'b', 'c']);
    // The README's LogStore example as a script would run it: open, push, exit without close().
    const run = child(
      dir,
      `const [tx] = await new Builder(await LogStore.open(dir)).maxDeliveries(1).open();\nawait tx.push('d');\nout('pushed');`,
    );
    expect(run.stderr).toBe('');
    expect([run.status, run.stdout]).toEqual([0, 'pushed\n']);
    const { items, deadLetters } = await drain(dir, 1);
    expect(deadLetters, 'nothing is dead-lettered on a count it did not have').toEqual([]);
    expect(items).toEqual([
      ['a', 1],
      ['b', 1],
      ['c', 1],
      ['d', 1],
    ]);
  });

  it('aConsumerThatExitsWithoutCloseCountsOnlyWhatItHandedOut', async () => {
    const dir = freshDir();
    await fill(dir, ['a', 'b', 'c', 'd', 'e']);
    // Two items handed out: 'a' acked, 'b' still held when the script ends without close().
    const run = child(
      dir,
      `const [tx, rx] = await new Builder(await LogStore.open(dir)).open();\nawait rx.tryReserve().ack();\nconst held = rx.tryReserve();\nout('holding ' + new TextDecoder().decode(held.bytes));`,
    );
    expect(run.stderr).toBe('');
    expect([run.status, run.stdout]).toEqual([0, 'holding b\n']);
    const { items, deadLetters } = await drain(dir, 10);
    expect(deadLetters).toEqual([]);
    expect(items, "'b' was handed out once; the others never were").toEqual([
      ['b', 2],
      ['c', 1],
      ['d', 1],
      ['e', 1],
    ]);
  });
});

describe('delivery counts after a SIGKILL in the middle of a batch', () => {
  for (const concurrency of [1, 4]) {
    it(`aBatchHandlerThatKillsItsProcessCountsItsBatchAndNothingAfterIt (concurrency ${concurrency})`, async () => {
      const dir = freshDir();
      const texts = Array.from({ length: 80 }, (_, i) => `item-${i}`);
      await fill(dir, texts);
      // Batches of 8: the worker acks whole batches until the batch holding 'item-13' comes, and
      // its handler kills the process. Other workers' batches may be in hand beside it.
      const run = child(
        dir,
        `const [tx, rx] = await new Builder(await LogStore.open(dir)).maxDeliveries(3).open();
await rx.process(async (items) => {
  const texts = items.map((i) => new TextDecoder().decode(i.bytes));
  out('batch ' + texts.join(','));
  if (texts.includes('item-13')) process.kill(process.pid, 'SIGKILL');
  await new Promise((r) => setImmediate(r));
}, { batch: { size: 8 }, concurrency: ${concurrency} });`,
      );
      expect(run.signal).toBe('SIGKILL');
      const batches = run.stdout
        .split('\n')
        .filter((l) => l.startsWith('batch '))
        .map((l) => l.slice(6).split(','));
      const killer = batches.find((b) => b.includes('item-13'))!;
      expect(killer, 'the batch holding item-13 ran').toBeDefined();
      const { items, deadLetters } = await drain(dir, 3);
      expect(deadLetters).toEqual([]);
      const counts = new Map(items);
      // The batch that killed the process was handed out: each of its items counts that delivery.
      for (const text of killer) expect(counts.get(text), `${text} was in the killing batch`).toBe(2);
      // Items no worker took before the kill were never handed out: no delivery counted. A batch
      // a worker gathered whose handler had not started yet was handed out (to that worker), so
      // only the items past the last batch printed and every batch the other workers could hold
      // are surely untaken.
      const handed = new Set(batches.flat());
      const lastPrinted = Math.max(...[...handed].map((t) => texts.indexOf(t)));
      const never = texts.slice(lastPrinted + 1 + (concurrency - 1) * 8);
      expect(never.length, 'some items were never handed out before the kill').toBeGreaterThan(0);
      for (const text of never) expect(counts.get(text), `${text} was never handed out`).toBe(1);
      // And nothing counts more than the one delivery it could have had.
      for (const [text, count] of counts) expect(count, text).toBeLessThanOrEqual(2);
      // Nothing is lost: every item not acked by a batch that finished is back.
      for (const text of texts) expect(counts.has(text) || handed.has(text), `${text} is neither back nor handled`).toBe(true);
    });
  }
});
