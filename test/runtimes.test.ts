/**
 * The built package under Bun and Deno, the runtimes pinned as devDependencies (`bun`, `deno`) and
 * run from node_modules/.bin: the LogStore code of the docs as a push / ack / reopen round trip, a
 * SIGKILLed writer under `group` (a second process refused while it lives) followed by recovery
 * in a second process of the same runtime,
 * and `pq stats`. Which lock each runtime takes is checked too: the kernel lock's fs-ext is a
 * nan addon built for Node, which neither loads, so both run on the pid lock file. Needs `dist/`
 * (`npm test` builds it; `npm run test:runtimes` runs only this file).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { distUrl, Lines, printedItems, root, writerSource } from './support/child-process.js';
import { docBlock } from './support/docs.js';
import { takeSpoolIn } from './support/pq-cli.js';

const made: string[] = [];
afterAll(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

function fresh(): string {
  const d = mkdtempSync(join(tmpdir(), 'pq-runtime-'));
  made.push(d);
  return d;
}

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };

interface Runtime {
  readonly name: 'bun' | 'deno';
  /** The arguments that run a script file, before the script's own. */
  readonly run: readonly string[];
  /** The start of `--version`'s first line, with the pinned version. */
  readonly versionLine: string;
  /** How loading fs-ext fails there (the reason shown by PERSISTENT_QUEUE_LOCK=flock). */
  readonly noFsExt: RegExp;
}

const RUNTIMES: readonly Runtime[] = [
  { name: 'bun', run: [], versionLine: pkg.devDependencies.bun!, noFsExt: /NODE_MODULE_VERSION/ },
  { name: 'deno', run: ['run', '-A'], versionLine: `deno ${pkg.devDependencies.deno!}`, noFsExt: /Node-API/ },
];

const binOf = (rt: Runtime): string => join(root, 'node_modules', '.bin', rt.name);

/** Run `script` (written to a file in `dir`) under `rt` to its end; its stdout. Throws on a non-zero exit. */
function runToEnd(rt: Runtime, dir: string, name: string, script: string, args: string[], env: Record<string, string> = {}): string {
  const file = join(dir, name);
  writeFileSync(file, script);
  return execFileSync(binOf(rt), [...rt.run, file, ...args], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1', ...env } });
}

/** The LogStore block of docs/guides/processing.md, importing the built package and opening `process.argv[2]`. */
function docsLogStoreBlock(): string {
  const block = docBlock('js', "LogStore.open('/var/lib/myapp/queue')");
  return block
    .replaceAll("from 'persistent-queue'", `from ${JSON.stringify(distUrl('index.js'))}`)
    .replace("'/var/lib/myapp/queue'", 'process.argv[2]');
}

/** After the docs' block: push a second item, ack the first, close, reopen, find only the second. */
const ROUND_TRIP = `
await tx.push('second');
const text = (item) => new TextDecoder().decode(item.bytes);
const first = await rx.reserve();
await first.ack();
await rx.close();
const again = await LogStore.open(process.argv[2]);
const [tx2, rx2] = await new Builder(again).open();
const ready = rx2.stats().ready;
const left = await rx2.reserve();
await left.ack();
await tx2.close();
const reopened = await LogStore.open(process.argv[2]);
const { count } = await reopened.open();
await reopened.close();
console.log(JSON.stringify({ first: text(first), ready, left: text(left), countAfterAck: count }));
`;

/** Opens the store at argv[2] and prints every unacked item as `seq payload`, then closes it. */
const READ_BACK = `
import { LogStore } from ${JSON.stringify(distUrl('index.js'))};
import { readFileSync } from 'node:fs';
const dir = process.argv[2];
const staleLock = readFileSync(dir + '/LOCK', 'utf8');
const store = await LogStore.open(dir);
await store.open();
for (const item of store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1e9 })) {
  console.log(item.seq + ' ' + new TextDecoder().decode(item.bytes));
}
await store.close();
console.log('stale lock ' + JSON.stringify(staleLock));
`;

/** Opens the store at argv[2] and prints the text of its LOCK while holding it, or the failure. */
const LOCK_TEXT = `
import { LogStore } from ${JSON.stringify(distUrl('index.js'))};
import { readFileSync } from 'node:fs';
try {
  const store = await LogStore.open(process.argv[2]);
  console.log(JSON.stringify({ lock: readFileSync(process.argv[2] + '/LOCK', 'utf8'), pid: process.pid }));
  await store.close();
} catch (e) {
  console.log(JSON.stringify({ code: e.code, message: e.message }));
}
`;

describe.each(RUNTIMES)('$name', (rt) => {
  test('runsThePinnedVersion', () => {
    const first = execFileSync(binOf(rt), ['--version'], { encoding: 'utf8' }).split('\n')[0]!;
    expect(first.startsWith(rt.versionLine)).toBe(true);
  });

  test('theDocsLogStoreCodeRoundTripsThroughAReopen', () => {
    const dir = fresh();
    const out = runToEnd(rt, dir, 'round-trip.mjs', docsLogStoreBlock() + ROUND_TRIP, [join(dir, 'queue')]);
    expect(JSON.parse(out)).toEqual({
      first: 'survives a crash and a power loss once this resolves',
      ready: 1,
      left: 'second',
      countAfterAck: 0,
    });
  });

  test('everyPushASigkilledWriterSawResolveUnderGroupIsRecoveredByASecondProcess', async () => {
    const dir = fresh();
    const store = join(dir, 'queue');
    const file = join(dir, 'writer.mjs');
    writeFileSync(file, writerSource('index.js', 'LogStore', 'group', 64));
    const writer = new Lines(spawn(binOf(rt), [...rt.run, file, store], { stdio: ['pipe', 'pipe', 'pipe'] }));
    try {
      await writer.until((lines) => lines.length >= 400);
      // While it lives, a second process of the same runtime is refused: the pid lock's liveness check works there.
      const refused = JSON.parse(runToEnd(rt, dir, 'lock.mjs', LOCK_TEXT, [store])) as { code: string; message: string };
      expect(refused).toMatchObject({ code: 'ERR_LOCKED', message: expect.stringContaining(`pid ${writer.child.pid}`) });
    } finally {
      await writer.kill();
    }
    expect(writer.child.signalCode).toBe('SIGKILL');
    const printed = printedItems(writer.lines);
    expect(printed.size).toBeGreaterThanOrEqual(399);

    const out = runToEnd(rt, dir, 'read-back.mjs', READ_BACK, [store]).trim().split('\n');
    // The killed writer held the pid lock; the second process took it over.
    // The pid lock's text: the writer's pid and its start stamp (FORMAT.md §5).
    expect(out.pop()).toMatch(new RegExp(`^stale lock "${writer.child.pid} start=[ts]\\d+\\\\n"$`));
    const held = printedItems(out);
    const missing = [...printed].filter(([seq, payload]) => held.get(seq) !== payload);
    expect(missing, 'pushes the writer saw resolve, missing or changed after SIGKILL').toEqual([]);
  });

  test('pqStatsPrintsWhatItPrintsUnderNode', () => {
    const dir = fresh();
    const store = join(dir, 'queue');
    const pq = join(root, 'dist', 'cli', 'pq.js');
    execFileSync(process.execPath, [pq, 'push', store, '--create', 'a', 'b', 'c'], { encoding: 'utf8' });
    // Spooled, as no process has the queue open: taken in as the next open of the queue does.
    takeSpoolIn(store);
    const underNode = execFileSync(process.execPath, [pq, 'stats', store, '--json'], { encoding: 'utf8' });
    const here = execFileSync(binOf(rt), [...rt.run, pq, 'stats', store, '--json'], { encoding: 'utf8' });
    expect(JSON.parse(here)).toEqual(JSON.parse(underNode));
    expect(JSON.parse(here)).toMatchObject({ unacked: 3, nextSeq: 4 });
    const text = execFileSync(binOf(rt), [...rt.run, pq, 'stats', store], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
    expect(text).toMatch(/^store {11}.*queue\nformat version {2}2\nunacked {9}3\n/);
  });

  test('theKernelLockIsNotAvailableSoThePidLockIsUsed', () => {
    const dir = fresh();
    const store = join(dir, 'queue');
    const held = JSON.parse(runToEnd(rt, dir, 'lock.mjs', LOCK_TEXT, [store])) as { lock: string; pid: number };
    expect(held.lock).toMatch(new RegExp(`^${held.pid} start=[ts]\\d+\n$`)); // the pid lock's text; the kernel lock's adds ' flock'
    // Asked for the kernel lock, the open fails and says why fs-ext does not load here.
    const forced = JSON.parse(runToEnd(rt, dir, 'lock.mjs', LOCK_TEXT, [store], { PERSISTENT_QUEUE_LOCK: 'flock' })) as {
      code: string;
      message: string;
    };
    expect(forced.code).toBe('ERR_STORE');
    expect(forced.message).toMatch(/npm install fs-ext/);
    expect(forced.message).toMatch(rt.noFsExt);
  });
});
