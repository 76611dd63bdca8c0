/**
 * A poison item that kills its process: real worker processes run `rx.process()` over a LogStore
 * with `maxDeliveries(3)` through the built package, and the handler SIGKILLs its own process on
 * one item. A supervisor restarts the worker each time it dies, until a worker finds the queue
 * idle. Delivery counts must survive each kill, so the poison item reaches the dead-letter queue
 * after exactly three kills, and every other item is processed. Needs `dist/` (`npm run build`,
 * which `npm test` runs first). Nothing here depends on timing: the kill is the handler's own.
 */
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { distUrl, lineWriterSource, root } from '../../support/child-process.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';

afterAll(cleanupDirs);

const built = existsSync(join(root, 'dist', 'stores', 'log', 'log-store.js')) && existsSync(join(root, 'dist', 'index.js'));

const ITEMS = 300;
/** Where the poison item sits among the others (0-based). */
const POISON_AT = 120;
const MAX_DELIVERIES = 3;
/** More starts than this means the poison item is not moving towards the dead letters. */
const STARTS_MAX = 8;

/**
 * The worker: processes until the queue is idle, printing `d <payload> <deliveries>` when a handler
 * starts and `p <payload>` when it returns (the item is then acked by process()). Lines go to
 * stdout with `out`, so every line printed before the kill reaches the supervisor.
 */
const WORKER = `${lineWriterSource}
const [storeUrl, indexUrl, dir, durability, acks, concurrency] = process.argv.slice(2);
const { LogStore } = await import(storeUrl);
const { Builder } = await import(indexUrl);
const builder = new Builder(await LogStore.open(dir)).durability(durability).maxDeliveries(${MAX_DELIVERIES}).retry({ kind: 'fixed', delayMs: 0 });
if (acks !== 'default') builder.ackDurability(acks);
const [tx, rx] = await builder.open();
out('start ' + rx.stats().ackDurability);
const stop = new AbortController();
const running = rx.process(async (item) => {
  const text = new TextDecoder().decode(item.bytes);
  out('d ' + text + ' ' + item.deliveries);
  if (text === 'poison') {
    process.kill(process.pid, 'SIGKILL');
    await new Promise(() => {});
  }
  out('p ' + text);
}, { concurrency: Number(concurrency), signal: stop.signal });
await rx.onIdle();
stop.abort();
await running;
out('idle ' + rx.stats().deadLetters);
await tx.close();
`;

interface Start {
  lines: string[];
  signal: NodeJS.Signals | null;
  code: number | null;
}

async function runWorker(script: string, dir: string, durability: string, acks: string, concurrency: number): Promise<Start> {
  const child = spawn(
    process.execPath,
    [script, distUrl('stores/log/log-store.js'), distUrl('index.js'), dir, durability, acks, String(concurrency)],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.once('close', (c, s) => resolve([c, s])),
  );
  if (signal === null && code !== 0) throw new Error(`worker exited with code ${code}: ${stderr}`);
  return { lines: stdout.split('\n').filter((l) => l !== ''), signal, code };
}

function payloadOf(i: number): string {
  return i === POISON_AT ? 'poison' : `item-${i}`;
}

describe.skipIf(!built)('a poison item that SIGKILLs its worker (real processes)', () => {
  const cases = [
    { durability: 'group', acks: 'default', concurrency: 1 },
    { durability: 'group', acks: 'group', concurrency: 1 },
    { durability: 'sync', acks: 'default', concurrency: 1 },
    { durability: 'sync', acks: 'group', concurrency: 1 },
    { durability: 'group', acks: 'default', concurrency: 4 },
    { durability: 'sync', acks: 'group', concurrency: 4 },
  ] as const;

  for (const { durability, acks, concurrency } of cases) {
    test(`durability '${durability}', acks '${acks}', concurrency ${concurrency}: the poison item is dead-lettered after ${MAX_DELIVERIES} kills, every other item is processed`, async () => {
      const dir = freshDir();
      const script = `${freshDir()}-worker.mjs`;
      writeFileSync(script, WORKER);
      {
        const [tx] = await new Builder(await LogStore.open(dir)).durability(durability).open();
        await tx.pushMany(Array.from({ length: ITEMS }, (_, i) => payloadOf(i)));
        await tx.close();
      }
      const starts: Start[] = [];
      for (;;) {
        expect(starts.length, 'worker starts before the queue was idle').toBeLessThan(STARTS_MAX);
        const start = await runWorker(script, dir, durability, acks, concurrency);
        starts.push(start);
        expect(start.lines[0], 'the ack policy in force').toBe(
          `start ${acks === 'default' ? (durability === 'sync' ? 'sync' : 'lazy') : acks}`,
        );
        if (start.signal === null) break;
        expect(start.signal).toBe('SIGKILL');
        // Every kill is the poison item's own: its handler was the last one to start.
        expect(
          start.lines.filter((l) => l.startsWith('d poison ')).length,
          `start ${starts.length} died without handling the poison item`,
        ).toBe(1);
      }
      const kills = starts.filter((s) => s.signal === 'SIGKILL').length;
      const last = starts[starts.length - 1]!;
      const all = starts.flatMap((s) => s.lines);
      // The poison item was handed out once per kill, with the count going up each time: the
      // mark of each redelivery was stored before its handler ran.
      expect(
        all.filter((l) => l.startsWith('d poison ')),
        'poison deliveries',
      ).toEqual(['d poison 1', 'd poison 2', 'd poison 3']);
      expect(kills, 'kills caused by the poison item').toBe(MAX_DELIVERIES);

      const processed = new Set(all.filter((l) => l.startsWith('p ')).map((l) => l.slice(2)));
      const [tx, rx] = await new Builder(await LogStore.open(dir)).durability(durability).open();
      const letters = await rx.deadLetters.list({ limit: ITEMS });
      expect(rx.stats().ready, 'nothing is left in the queue').toBe(0);
      await tx.close();
      expect(last.lines[last.lines.length - 1], 'the last worker saw the queue idle').toBe(`idle ${letters.length}`);

      const poison = letters.find((l) => dec(l.bytes) === 'poison');
      // Three deliveries, each one killed: the fourth start found a stored count of 3 and moved
      // the item before handing it out. The kill left no handler error, so the reason is the count.
      expect(poison, 'the poison item is a dead letter').toMatchObject({
        seq: POISON_AT + 1,
        deliveries: MAX_DELIVERIES,
        reason: `handed out ${MAX_DELIVERIES} times (maxDeliveries ${MAX_DELIVERIES})`,
      });
      expect(processed.has('poison')).toBe(false);

      const others = letters.filter((l) => l !== poison);
      if (concurrency === 1) {
        // One item in flight at a time: the poison item was alone when each kill came.
        expect(
          others.map((l) => dec(l.bytes)),
          'nothing else is dead-lettered',
        ).toEqual([]);
      } else {
        // Several in flight: the workers reserve the items after the poison item together with
        // it, and its handler kills the process before theirs start. Those items were handed out
        // in every killed start too, so they count one delivery per kill, as the poison item
        // does, and are moved with it, never having reached a handler. Only items that can have
        // been in flight beside it are so moved.
        expect(others.length, 'bystanders dead-lettered').toBeLessThan(concurrency);
        for (const l of others) {
          expect(Math.abs(l.seq - poison!.seq), `${dec(l.bytes)} was never in flight beside the poison item`).toBeLessThan(concurrency);
          expect(l).toMatchObject({ deliveries: MAX_DELIVERIES, reason: poison!.reason });
        }
      }
      // Nothing lost: every other item was processed, or (beside the poison item) is a dead
      // letter; the queue holds nothing.
      const dead = new Set(letters.map((l) => dec(l.bytes)));
      for (let i = 0; i < ITEMS; i++) {
        const text = payloadOf(i);
        if (text !== 'poison') expect(processed.has(text) || dead.has(text), `${text} was neither processed nor dead-lettered`).toBe(true);
      }
      console.log(
        `[poison kill] ${durability}/${acks}/c${concurrency}: ${starts.length} starts, ${kills} kills, ${letters.length} dead letters, ${processed.size} processed`,
      );
    }, 30_000);
  }
});
