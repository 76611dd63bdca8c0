/**
 * Producers in other processes, for real: an owner process holds the queue, producer processes
 * `connect()` to it (all of them import the built dist/). What every producer saw resolve must be
 * in the store, delivered once and in each producer's order, even when the owner is SIGKILLed.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { LogStore } from '../../src/stores/log/log-store.js';
import { Builder } from '../../src/core/builder.js';
import { connect } from '../../src/remote/connect.js';
import { type Lines, distUrl, runModule } from '../support/child-process.js';

const dirs: string[] = [];
const children: Lines[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function fresh(): { base: string; dir: string } {
  const base = mkdtempSync(join(tmpdir(), 'pq-procs-'));
  dirs.push(base);
  mkdirSync(join(base, 'scripts'));
  return { base, dir: join(base, 'store') };
}

function spawnChild(base: string, name: string, source: string, args: string[]): Lines {
  const child = runModule(join(base, 'scripts'), name, source, args);
  children.push(child);
  return child;
}

const dist = JSON.stringify(distUrl('index.js'));

/** Waits until the child has exited and returns its exit code. */
function exited(lines: Lines): Promise<number | null> {
  const child = lines.child;
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

describe('producers in other processes', () => {
  test('fourProducerProcessesOfAThousandPushesEachAreDeliveredOnceAndInEachProducersOrder', async () => {
    const { base, dir } = fresh();
    const owner = spawnChild(
      base,
      'owner.mjs',
      `import { Builder, LogStore } from ${dist};
const [, rx] = await new Builder(await LogStore.open(process.argv[2])).capacity(256).open();
console.log('ready');
const expected = Number(process.argv[3]);
const next = new Map();
const violations = [];
let total = 0;
for await (const item of rx) {
  const [producer, i] = new TextDecoder().decode(item.bytes).split(':').map(Number);
  const want = next.get(producer) ?? 0;
  if (i !== want) violations.push(producer + ':' + i + ' after ' + (want - 1));
  next.set(producer, i + 1);
  await item.ack();
  if (++total === expected) break;
}
console.log(JSON.stringify({ total, violations, next: [...next].sort() }));
await rx.close();
`,
      [dir, '4000'],
    );
    await owner.until((l) => l.includes('ready'));
    const producers = [0, 1, 2, 3].map((id) =>
      spawnChild(
        base,
        `producer-${id}.mjs`,
        `import { connect } from ${dist};
const producer = await connect(process.argv[2]);
const id = process.argv[3];
const seqs = [];
let window = [];
for (let i = 0; i < 1000; i++) {
  // Up to 32 pushes in flight, called in order: their seqs must come back in that order.
  window.push(producer.push(id + ':' + i).then((seq) => (seqs[i] = seq)));
  if (window.length === 32) {
    await Promise.all(window);
    window = [];
  }
}
await Promise.all(window);
const ascending = seqs.every((s, i) => i === 0 || s > seqs[i - 1]);
console.log(JSON.stringify({ mode: producer.mode, count: seqs.length, ascending }));
await producer.close();
`,
        [dir, String(id)],
      ),
    );
    for (const p of producers) {
      await p.until((l) => l.some((x) => x.startsWith('{')));
      expect(JSON.parse(p.lines.find((x) => x.startsWith('{'))!), p.stderr).toEqual({ mode: 'endpoint', count: 1000, ascending: true });
      expect(await exited(p), p.stderr).toBe(0);
    }
    await owner.until((l) => l.some((x) => x.startsWith('{')));
    const result = JSON.parse(owner.lines.find((x) => x.startsWith('{'))!);
    expect(result).toEqual({
      total: 4000,
      violations: [],
      next: [
        [0, 1000],
        [1, 1000],
        [2, 1000],
        [3, 1000],
      ],
    });
    expect(await exited(owner), owner.stderr).toBe(0);
    // Nothing more was stored than the 4000 pushes.
    const store = await LogStore.open(dir);
    const [, rx] = await new Builder(store).open();
    expect(rx.tryReserve()).toBe(null);
    expect(store.inspect().nextSeq).toBe(4001);
    await rx.close();
  });

  test('anOwnerThatNeverAnswersIsTakenForNoneTheProducerSpoolsAndTheOwnerIngestsOnceItRuns', async () => {
    const { base, dir } = fresh();
    const owner = spawnChild(
      base,
      'owner.mjs',
      `import { Builder, LogStore } from ${dist};
const [, rx] = await new Builder(await LogStore.open(process.argv[2])).open();
console.log('ready');
for await (const item of rx) {
  console.log('got ' + new TextDecoder().decode(item.bytes));
  await item.ack();
}
`,
      [dir],
    );
    await owner.until((l) => l.includes('ready'));
    // Stopped: its socket accepts (the kernel's backlog), nobody answers.
    owner.child.kill('SIGSTOP');
    try {
      const producer = await connect(dir);
      expect(producer.mode).toBe('spool');
      expect(await producer.push('while it was stopped')).toBe(0);
      await producer.close();
    } finally {
      owner.child.kill('SIGCONT');
    }
    // Running again, it finds the spool at its next poll.
    await owner.until((l) => l.includes('got while it was stopped'));
  });

  test('anOwnerSigkilledMidStreamLosesNoPushThatResolvedAndNoProducerHangs', async () => {
    const { base, dir } = fresh();
    const owner = spawnChild(
      base,
      'owner.mjs',
      `import { Builder, LogStore } from ${dist};
await new Builder(await LogStore.open(process.argv[2])).durability('group').open();
console.log('ready');
setInterval(() => {}, 1 << 30);
`,
      [dir],
    );
    await owner.until((l) => l.includes('ready'));
    const producers = [0, 1, 2, 3].map((id) =>
      spawnChild(
        base,
        `producer-${id}.mjs`,
        `import { connect, QueueError } from ${dist};
const producer = await connect(process.argv[2]);
const id = process.argv[3];
let n = 0;
await Promise.all(Array.from({ length: 16 }, async () => {
  for (;;) {
    const payload = id + ':' + n++;
    try {
      const seq = await producer.push(payload);
      process.stdout.write('ok ' + seq + ' ' + payload + '\\n');
    } catch (error) {
      process.stdout.write('err ' + (error instanceof QueueError ? error.code : 'untyped ' + error) + ' ' + payload + '\\n');
      return;
    }
  }
}));
await producer.close();
console.log('stopped');
`,
        [dir, String(id)],
      ),
    );
    for (const p of producers) await p.until((l) => l.filter((x) => x.startsWith('ok ')).length >= 200);
    await owner.kill();
    // Every producer ends: each of its pushes resolved or was refused with a typed error.
    for (const p of producers) {
      await p.until((l) => l.includes('stopped'));
      expect(await exited(p), p.stderr).toBe(0);
    }
    const resolved = new Map<number, string>();
    const errors = new Set<string>();
    for (const p of producers) {
      for (const line of p.lines) {
        const ok = /^ok (\d+) (.*)$/.exec(line);
        if (ok) resolved.set(Number(ok[1]), ok[2]!);
        const err = /^err (\S+) /.exec(line);
        if (err) errors.add(err[1]!);
      }
      expect(p.lines.filter((l) => l.startsWith('err ')).length).toBe(16);
    }
    expect([...errors]).toEqual(['ERR_OWNER_GONE']);
    expect(resolved.size).toBeGreaterThanOrEqual(800);
    // Restarted: every push any producer saw resolve is there, at its seq.
    const store = await LogStore.open(dir);
    const [tx, rx] = await new Builder(store).open();
    const stored = new Map<number, string>();
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) stored.set(item.seq, new TextDecoder().decode(item.bytes));
    const missing = [...resolved].filter(([seq, payload]) => stored.get(seq) !== payload);
    expect(missing).toEqual([]);
    // The killed owner's socket was replaced: a producer reaches the new owner.
    const producer = await connect(dir);
    expect(producer.mode).toBe('endpoint');
    expect(await producer.push('after the restart')).toBe(store.inspect().nextSeq - 1);
    await producer.close();
    await tx.close();
  });
});
