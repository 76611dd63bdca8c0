/**
 * Real processes: a child pushes (and acks) through the built package and is SIGKILLed at seeded
 * moments; the parent reopens and checks what survived. Needs `dist/` (`npm run build`, which
 * `npm test` runs first). Kill points are counts of resolved operations, never wall-clock delays.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { Prng, formatSeed, seedFromEnv, withReproduction } from '../../../src/testing/index.js';
import { lineWriterSource } from '../../support/child-process.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';

afterAll(cleanupDirs);

const root = resolve(import.meta.dirname, '../../..');
const distStore = join(root, 'dist', 'stores', 'log', 'log-store.js');
const distIndex = join(root, 'dist', 'index.js');
const built = existsSync(distStore) && existsSync(distIndex);

/**
 * The child: pushes p0, p1, ... with `durability`, acks every third one, reports each resolution
 * with `out`, whose line is in the pipe when it returns: a kill after an operation keeps its line.
 */
const CHILD = `
${lineWriterSource}
const [storeUrl, indexUrl, dir, durability, mode] = process.argv.slice(2);
const { LogStore } = await import(storeUrl);
const { Builder } = await import(indexUrl);
const store = await LogStore.open(dir);
const [tx, rx] = await new Builder(store).durability(durability).open();
out('ready');
if (mode === 'hold') { setInterval(() => {}, 1 << 30); }
else if (mode === 'ooo') {
  const seqs = await tx.pushMany(['1', '2', '3', '4', '5']);
  const got = [];
  for (let i = 0; i < 5; i++) got.push(await rx.reserve());
  await got[4].ack();
  await got[2].ack();
  out('acked');
  setInterval(() => {}, 1 << 30);
} else {
  let i = 0;
  const inFlight = durability === 'group' ? 64 : 1;
  const pump = async () => {
    for (;;) {
      const n = i++;
      await tx.push('p' + n);
      out('p ' + n);
    }
  };
  const held = []; // reservations kept in flight: the crash must return them
  const consume = async () => {
    for (;;) {
      const item = await rx.reserve();
      const n = Number(new TextDecoder().decode(item.bytes).slice(1));
      if (n % 3 === 0) { await item.ack(); out('a ' + n); }
      else held.push(item);
    }
  };
  for (let k = 0; k < inFlight; k++) pump();
  if (mode === 'ack') consume();
}
`;

function startChild(
  dir: string,
  durability: string,
  mode: string,
): { child: ChildProcess; lines: string[]; waitFor: (pred: (lines: string[]) => boolean) => Promise<void> } {
  const script = join(freshDir() + '-child.mjs');
  writeFileSync(script, CHILD);
  const child = spawn(process.execPath, [script, pathToFileURL(distStore).href, pathToFileURL(distIndex).href, dir, durability, mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  let waiters: (() => void)[] = [];
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    const parts = buf.split('\n');
    buf = parts.pop()!;
    lines.push(...parts);
    for (const w of waiters) w();
  });
  const waitFor = (pred: (l: string[]) => boolean): Promise<void> =>
    new Promise((res, rej) => {
      const check = (): void => {
        if (pred(lines)) {
          waiters = waiters.filter((w) => w !== check);
          res();
        }
      };
      waiters.push(check);
      child.once('exit', (code) => rej(new Error(`child exited early (${code}): ${lines.slice(-3).join(' | ')}`)));
      check();
    });
  return { child, lines, waitFor };
}

/** SIGKILL `child` and wait until its stdout is read to the end ('close'; 'exit' can come first), so every line it wrote is in. */
async function kill(child: ChildProcess): Promise<void> {
  const closed = new Promise((r) => child.once('close', r));
  child.kill('SIGKILL');
  await closed;
}

/** Everything unacked, in order, read through the store, as numbers ('4' -> 4). */
async function survivors(dir: string): Promise<number[]> {
  const store = await LogStore.open(dir);
  await store.open();
  const got = store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 }).map((i) => dec(i.bytes));
  await store.close();
  return got.map(Number);
}

describe.skipIf(!built)('SIGKILLed producer (real processes)', () => {
  for (const durability of ['sync', 'group'] as const) {
    test(`every push and ack reported resolved under '${durability}' survives SIGKILL`, async () => {
      const seed = seedFromEnv(0xc0ffee + (durability === 'sync' ? 0 : 1));
      const rnd = new Prng(seed);
      const dir = freshDir();
      let round = 0;
      await withReproduction(
        () => `SEED=${formatSeed(seed)} npx vitest run test/stores/log/process-crash (round ${round})`,
        async () => {
          for (; round < 10; round++) {
            // Each round starts from an empty store, so payload numbers p0, p1, ... are unambiguous.
            const mode = round % 2 === 0 ? 'ack' : 'push';
            const { child, lines, waitFor } = startChild(dir, durability, mode);
            const target = 1 + rnd.int(durability === 'group' ? 400 : 60);
            await waitFor((l) => l.filter((x) => x.startsWith('p ')).length >= target);
            await kill(child);
            const pushed = new Set<number>();
            const acked = new Set<number>();
            for (const l of lines) {
              const [k, v] = l.split(' ');
              if (k === 'p') pushed.add(Number(v));
              if (k === 'a') acked.add(Number(v));
            }
            const store = await LogStore.open(dir);
            const r = await store.open();
            const items = store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 });
            const texts = items.map((i) => dec(i.bytes));
            for (const t of texts) expect(t, 'nothing invented').toMatch(/^p\d+$/);
            const seen = texts.map((t) => Number(t.slice(1)));
            for (let k = 1; k < seen.length; k++) expect(seen[k]!, 'FIFO order').toBeGreaterThan(seen[k - 1]!);
            const seenSet = new Set(seen);
            // In 'ack' mode the child acks every third item; an ack in flight (not yet reported)
            // may have reached the disk, so only those items may be missing.
            const mayBeAcked = (n: number): boolean => mode === 'ack' && n % 3 === 0;
            for (const p of pushed) if (!acked.has(p) && !mayBeAcked(p)) expect(seenSet.has(p), `reported push p${p} lost`).toBe(true);
            for (const a of acked) expect(seenSet.has(a), `reported ack of p${a} undone`).toBe(false);
            expect(r.count).toBe(items.length);
            if (items.length > 0)
              await store.ack(
                items.map((i) => i.seq),
                true,
              );
            await store.close();
          }
        },
      );
    });
  }

  test('outOfOrderAcksUnderSyncSurviveSigkill', async () => {
    const dir = freshDir();
    const { child, waitFor } = startChild(dir, 'sync', 'ooo');
    await waitFor((l) => l.includes('acked'));
    await kill(child);
    expect(await survivors(dir)).toEqual([1, 2, 4]);
  });

  test('aSecondProcessGetsErrLockedUntilTheHolderIsKilled', async () => {
    const dir = freshDir();
    const { child, waitFor } = startChild(dir, 'sync', 'hold');
    await waitFor((l) => l.includes('ready'));
    await expect(LogStore.open(dir)).rejects.toMatchObject({
      name: 'OpenError',
      code: 'ERR_LOCKED',
      message: new RegExp(`pid ${child.pid}`),
    });
    await kill(child);
    const store = await LogStore.open(dir);
    await store.close();
  });
});
