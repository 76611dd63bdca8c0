// Instructions per item of the README's serial loop (one producer's `await push`, a consumer's
// `await reserve()` + `await item.ack()`, 128 B; with `for-await`, the consumer is the README's
// `for await (const item of rx)` + `await item.ack()`) over MemStore or LogStore under `none`, counted by
// `valgrind --tool=callgrind`: unlike time on this shared machine, the count repeats to within a
// few per cent whatever else runs. Each count is the difference between a run of `large` items and
// one of `small`, divided by `large - small`, so that start-up and the warm-up cancel out.
// With `wait`, the cell is `group` push only instead: 64 producers each awaiting push in a loop over
// a MemStore whose appends resolve a turn later (setImmediate), as LogStore's do after their
// fdatasync, so that the core gathers batches as it does under `group`; no consumer. It counts the
// core's own work per push in that cell, without the disk.
// Usage: npm run build && node bench/experiments/instructions-per-item.mjs [mem|log|wait][,for-await] [small=50000] [large=200000] [checkout with dist/=.]
// (needs valgrind; the two runs go side by side and take a minute or two)
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const self = fileURLToPath(import.meta.url);

if (process.argv[2] === '--child') {
  const [, , , root, spec, nArg] = process.argv;
  const [kind, consumer] = spec.split(',');
  const m = await import(pathToFileURL(join(root, 'dist', 'index.js')).href);
  const n = Number(nArg);
  const payload = new Uint8Array(128).fill(7);
  const dir = kind === 'log' ? mkdtempSync(join(tmpdir(), 'pq-ipi-')) : undefined;
  const store = dir === undefined ? new m.MemStore() : await m.LogStore.open(dir);
  if (kind === 'wait') {
    // Each append resolves a turn after it was stored: the core sees it as it sees an fdatasync.
    const append = store.append.bind(store);
    store.append = (items, sync) => {
      const stored = append(items, sync);
      return new Promise((resolve, reject) => setImmediate(() => stored.then(resolve, reject)));
    };
  }
  const [tx, rx] = await new m.Builder(store).durability(kind === 'wait' ? 'group' : 'none').open();
  const run = async (count) => {
    if (kind === 'wait') {
      const each = Math.ceil(count / 64);
      await Promise.all(
        Array.from({ length: 64 }, async () => {
          for (let i = 0; i < each; i++) await tx.push(payload);
        }),
      );
      return;
    }
    const producer = (async () => {
      for (let i = 0; i < count; i++) await tx.push(payload);
    })();
    if (consumer === 'for-await') {
      let i = 0;
      if (count > 0) {
        for await (const item of rx) {
          await item.ack();
          if (++i === count) break;
        }
      }
    } else {
      for (let i = 0; i < count; i++) {
        const item = await rx.reserve();
        await item.ack();
      }
    }
    await producer;
  };
  await run(20_000); // the same warm-up in both runs
  await run(n);
  await rx.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
} else {
  const spec = process.argv[2] ?? 'mem';
  const [kind, consumer] = spec.split(',');
  const small = Number(process.argv[3] ?? 50_000);
  const large = Number(process.argv[4] ?? 200_000);
  const root = resolve(process.argv[5] ?? join(self, '..', '..', '..'));
  if (kind !== 'mem' && kind !== 'log' && kind !== 'wait') throw new TypeError(`store: mem, log or wait, got ${kind}`);
  if (consumer !== undefined && consumer !== 'for-await') throw new TypeError(`consumer: for-await or none, got ${consumer}`);
  if (!(Number.isSafeInteger(small) && Number.isSafeInteger(large) && small >= 0 && large > small))
    throw new RangeError('expected 0 <= small < large');
  const count = (n) =>
    new Promise((done, fail) => {
      execFile(
        'valgrind',
        ['--tool=callgrind', '--callgrind-out-file=/dev/null', process.execPath, self, '--child', root, spec, String(n)],
        { maxBuffer: 1 << 24 },
        (error, _out, err) => {
          if (error) return fail(new Error(`valgrind exited with ${error.code}: ${err.trim().split('\n').slice(-3).join(' | ')}`));
          const match = /Collected : (\d+)/.exec(err);
          if (!match) return fail(new Error('no instruction count in valgrind output'));
          done(Number(match[1]));
        },
      );
    });
  const [a, b] = await Promise.all([count(small), count(large)]);
  const cell =
    kind === 'wait'
      ? 'MemStore appending a turn late, group, 64 producers, push only'
      : `${kind === 'mem' ? 'MemStore' : 'LogStore'} none, serial loop${consumer ? ` (${consumer})` : ''}`;
  console.log(
    `${cell}, ${root}: ${Math.round((b - a) / (large - small)).toLocaleString('en-US')} instructions per item (${small} and ${large} items: ${a.toLocaleString('en-US')} and ${b.toLocaleString('en-US')})`,
  );
}
