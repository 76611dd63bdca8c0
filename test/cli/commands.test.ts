/** `pq` as a user runs it: the built binary in a spawned process, on a real directory. */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { closeQueue, pushStored, serveQueue, takeSpoolIn } from '../support/pq-cli.js';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let dir: string;
let work: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[], input?: string, nodeArgs: string[] = []) {
  const r = spawnSync(process.execPath, [...nodeArgs, bin, ...args], { encoding: 'utf8', input, env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Node arguments that make the CLI's stderr claim to be a terminal, as it is when a person runs pq. */
const STDERR_IS_A_TTY = [
  '--import',
  `data:text/javascript,${encodeURIComponent("Object.defineProperty(process.stderr, 'isTTY', { value: true });")}`,
];

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };

/** The names and bytes of every file under `path` (the spool is a directory of its own). */
function hashDir(path: string, h = createHash('sha256')): string {
  for (const entry of readdirSync(path, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    h.update(entry.name);
    if (entry.isDirectory()) hashDir(join(path, entry.name), h);
    else h.update(readFileSync(join(path, entry.name)));
  }
  return h.copy().digest('hex');
}

function segments(path: string): string[] {
  return readdirSync(path)
    .filter((n) => n.startsWith('seg-'))
    .sort();
}

describe('push, dump, pop, stats', () => {
  it('pushesArgumentsAndStdinLinesAndDumpsThemWithoutConsuming', async () => {
    // A process serves the queue: each push is answered with its seq.
    const owner = await serveQueue(work, dir);
    try {
      expect(pq(['push', dir, 'alpha', 'beta'])).toMatchObject({ code: 0, stdout: '1\n2\n' });
      expect(pq(['push', dir], 'gamma\ndelta\n')).toMatchObject({ code: 0, stdout: '3\n4\n' });
    } finally {
      await closeQueue(owner);
    }
    const jsonl = pq(['dump', dir]);
    expect(jsonl.code).toBe(0);
    const rows = jsonl.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows.map((r) => [r.seq, r.text])).toEqual([
      [1, 'alpha'],
      [2, 'beta'],
      [3, 'gamma'],
      [4, 'delta'],
    ]);
    expect(pq(['dump', dir, '--from', '2', '--limit', '2', '--format', 'text']).stdout).toBe('beta\ngamma\n');
    expect(pq(['dump', dir, '--from', '4', '--format', 'hex']).stdout).toBe(`4\t${Buffer.from('delta').toString('hex')}\n`);
    // dump consumed nothing
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ unacked: 4, firstSeq: 1, nextSeq: 5 });
  });

  it('popAcksUnlessNoAck', () => {
    // Spooled: the first pop takes them in, in their order.
    expect(pq(['push', dir, '--create', 'a', 'b', 'c']).stdout).toMatch(/^spooled 3 item\(s\)/);
    expect(pq(['pop', dir, '--no-ack', '--format', 'text'])).toMatchObject({ code: 0, stdout: 'a\n' });
    expect(pq(['pop', dir, '--count', '2', '--format', 'text'])).toMatchObject({ code: 0, stdout: 'a\nb\n' });
    const stats = JSON.parse(pq(['stats', dir, '--json']).stdout);
    expect(stats).toMatchObject({
      unacked: 1,
      firstSeq: 3,
      nextSeq: 4,
      formatVersion: 2,
      lastShutdownClean: true,
      storeId: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    expect(pq(['pop', dir, '--count', '5']).stdout.trim()).toBe(
      JSON.stringify({ seq: 3, bytes: 1, priority: 0, notBefore: null, deliveries: 1, text: 'c' }),
    );
    expect(pq(['pop', dir]).stdout).toBe('');
  });

  it('dumpAndPopBothPrintJsonLinesUnlessAskedForText', () => {
    // A payload holding a newline: one JSON line, two lines as text.
    pushStored(dir, ['--create', 'a', 'line one\nstill one']);
    const item = (seq: number, text: string, extra: object = {}) =>
      JSON.stringify({ seq, bytes: Buffer.byteLength(text), priority: 0, notBefore: null, ...extra, text });
    const dumped = `${item(1, 'a')}\n${item(2, 'line one\nstill one')}\n`;
    expect(pq(['dump', dir])).toMatchObject({ code: 0, stdout: dumped });
    expect(pq(['dump', dir, '--json']).stdout).toBe(dumped);
    expect(pq(['pop', dir, '--no-ack'])).toMatchObject({ code: 0, stdout: `${item(1, 'a', { deliveries: 1 })}\n` });
    expect(pq(['pop', dir, '--no-ack', '--json']).stdout).toBe(`${item(1, 'a', { deliveries: 2 })}\n`);
    // The other convention, payloads as they are, by a flag for both.
    expect(pq(['dump', dir, '--format', 'text']).stdout).toBe('a\nline one\nstill one\n');
    expect(pq(['pop', dir, '--count', '2', '--format', 'text']).stdout).toBe('a\nline one\nstill one\n');
  });

  it('withCodecJsonDumpPopAndDlqListShowAJsonQueuesValuesNotEscapedText', async () => {
    // A queue written with the json() codec, as an application writes it; one item dead-lettered.
    const lib = (await import(pathToFileURL(join(root, 'dist', 'index.js')).href)) as typeof import('../../src/index.js');
    const [tx, rx] = await new lib.Builder(await lib.LogStore.open(dir)).codec(lib.json()).open();
    await tx.pushMany([{ order: 17, lines: ['a', 'b'] }, 'just a string', 42, { order: 18 }]);
    const taken = [];
    for (let i = 0; i < 4; i++) taken.push((await rx.reserve())!);
    await taken[3]!.deadLetter('bad order');
    for (const item of taken.slice(0, 3)) await item.nack();
    await tx.close();
    pushStored(dir, ['not json {']);

    // The store does not know the codec: without --codec, a payload is shown as its text.
    expect(JSON.parse(pq(['dump', dir]).stdout.split('\n')[0]!)).toMatchObject({ seq: 1, text: '{"order":17,"lines":["a","b"]}' });
    const rows = pq(['dump', dir, '--codec', 'json'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows.map((r) => ('json' in r ? { json: r.json } : { text: r.text }))).toEqual([
      { json: { order: 17, lines: ['a', 'b'] } },
      { json: 'just a string' },
      { json: 42 },
      { text: 'not json {' }, // not JSON: shown as any payload, under its own field name
    ]);
    expect(JSON.parse(pq(['pop', dir, '--no-ack', '--codec', 'json']).stdout)).toMatchObject({
      seq: 1,
      json: { order: 17, lines: ['a', 'b'] },
    });
    expect(JSON.parse(pq(['dlq', 'list', dir, '--codec', 'json', '--json']).stdout)).toMatchObject({
      seq: 4,
      reason: 'bad order',
      json: { order: 18 },
    });
    expect(pq(['dlq', 'list', dir, '--codec', 'json']).stdout).toMatch(/ {2}12 B json \{"order":18\}\n$/);
    // Text output is the payload as it is, JSON text already.
    expect(pq(['dump', dir, '--codec', 'json', '--format', 'text', '--limit', '1']).stdout).toBe('{"order":17,"lines":["a","b"]}\n');
    const bad = pq(['dump', dir, '--codec', 'structured']);
    expect(bad).toMatchObject({ code: 2, stderr: "pq: --codec must be bytes, text or json, got 'structured' (see pq dump --help)\n" });
  });

  it('popAcksInBatchesThatShareAnFsync', () => {
    pushStored(dir, ['--create', '--durability', 'none'], Array.from({ length: 1000 }, (_, i) => `item-${i}`).join('\n') + '\n');
    // Counts the fsyncs and fdatasyncs of the pq process and prints the count as it exits.
    const countSyncs = [
      '--import',
      `data:text/javascript,${encodeURIComponent(`
        import fs from 'node:fs';
        import { syncBuiltinESMExports } from 'node:module';
        let syncs = 0;
        for (const name of ['fsync', 'fdatasync', 'fsyncSync', 'fdatasyncSync']) {
          const original = fs[name];
          fs[name] = (...args) => { syncs++; return original(...args); };
        }
        syncBuiltinESMExports();
        process.on('exit', () => fs.writeSync(2, 'syncs=' + syncs + '\\n'));
      `)}`,
    ];
    const r = pq(['pop', dir, '--count', '1000'], undefined, countSyncs);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n')).toHaveLength(1001);
    const syncs = Number(/syncs=(\d+)/.exec(r.stderr)![1]);
    // One fsync per ack was 1000 of them; batches of up to 256 share one (or two) each.
    expect(syncs).toBeGreaterThan(0);
    expect(syncs).toBeLessThan(100);
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ unacked: 0 });
  });

  it('statsPrintsAReadableSummary', () => {
    pushStored(dir, ['--create', 'x']);
    const r = pq(['stats', dir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/unacked\s+1\n/);
    expect(r.stdout).toMatch(/format version\s+2/);
    expect(r.stdout).toMatch(/last close\s+clean/);
  });

  it('statsCountsUnackedItemsAsUnackedNotAsReady', () => {
    pushStored(dir, ['--create', 'now']);
    pushStored(dir, ['later', '--delay', '600000']);
    const json = JSON.parse(pq(['stats', dir, '--json']).stdout) as Record<string, unknown>;
    // The delayed item is not ready, and in a process with the queue open some would be in flight.
    expect(json).toMatchObject({ unacked: 2, delayed: 1 });
    expect(json).not.toHaveProperty('ready');
    const text = pq(['stats', dir]).stdout;
    expect(text).toMatch(/^unacked\s+2$/m);
    expect(text).not.toMatch(/ready/);
  });

  it('compactReportsBytesReclaimed', () => {
    pq(['push', dir, '--create'], Array.from({ length: 200 }, (_, i) => `item-${i}`).join('\n') + '\n');
    expect(pq(['pop', dir, '--count', '200']).stdout.trim().split('\n')).toHaveLength(200);
    const r = pq(['compact', dir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^reclaimed .*on disk\n$/);
    expect(r.stderr, 'no progress when stderr is not a terminal').toBe('');
  });
});

describe('verify', () => {
  it('aSoundStoreVerifiesWithExitZeroAndChangesNothing', () => {
    pushStored(dir, ['--create', 'one', 'two']);
    const before = hashDir(dir);
    const r = pq(['verify', dir]);
    expect(r).toMatchObject({ code: 0 });
    expect(r.stdout).toMatch(/sound/);
    expect(hashDir(dir)).toBe(before);
    expect(JSON.parse(pq(['verify', dir, '--json']).stdout)).toMatchObject({ problems: [] });
  });

  it('aFlippedByteIsReportedWithFileAndOffsetAndExitOne', () => {
    pushStored(dir, ['--create', 'one', 'two', 'three']);
    const seg = join(dir, segments(dir)[0]!);
    const bytes = readFileSync(seg);
    const at = bytes.indexOf(Buffer.from('two'));
    bytes[at] ^= 0x01;
    writeFileSync(seg, bytes);
    const before = hashDir(dir);
    const r = pq(['verify', dir]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(segments(dir)[0]!);
    expect(r.stdout).toMatch(/at offset \d+/);
    expect(hashDir(dir)).toBe(before);
  });
});

describe('failures are one clear line and a non-zero exit', () => {
  it('usageErrorsAreOneLineNamingTheHelpToReadAndExitTwo', () => {
    const cases: [string[], string][] = [
      [['frobnicate'], "pq: unknown command 'frobnicate' (see pq --help)"],
      [['--frobnicate'], 'pq: unknown option --frobnicate (see pq --help)'],
      [['stats'], 'pq: pq stats takes exactly one <dir>, got 0 (see pq stats --help)'],
      [['dump', dir, '--limit', 'x'], "pq: --limit must be an integer >= 1, got 'x' (see pq dump --help)"],
      [['pop', dir, '--count', '0'], "pq: --count must be an integer >= 1, got '0' (see pq pop --help)"],
      [['dump', dir, '--format', 'xml'], "pq: --format must be jsonl, text or hex, got 'xml' (see pq dump --help)"],
      [['stats', dir, '--bogus'], "pq: unknown option --bogus for 'stats' (see pq stats --help)"],
      [['dump', dir, '--x'], "pq: unknown option --x for 'dump' (see pq dump --help)"],
      [['dump', dir, '-x'], "pq: unknown option -x for 'dump' (see pq dump --help)"],
      [['dump', dir, '--limit', '-1'], "pq: --limit must be an integer >= 1, got '-1' (see pq dump --help)"],
      [['dump', dir, '--from'], 'pq: option --from needs a value (SEQ) (see pq dump --help)'],
      [['dump', dir, '--from', '--limit', '3'], 'pq: option --from needs a value (SEQ) (see pq dump --help)'],
      [['pop', dir, '--no-ack=yes'], "pq: option --no-ack takes no value, got 'yes' (see pq pop --help)"],
    ];
    for (const [args, message] of cases) {
      const r = pq(args);
      expect(r, args.join(' ')).toMatchObject({ code: 2, stdout: '', stderr: `${message}\n` });
    }
  });

  it('pqWithoutACommandPrintsTheUsageOnStderrAndExitsTwo', () => {
    const r = pq([]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^Usage: pq <command>/);
  });

  it('errorsAreAJsonObjectOnStderrWithJson', () => {
    let r = pq(['dump', dir, '--x', '--json']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(JSON.parse(r.stderr)).toEqual({ code: 'ERR_USAGE', message: "unknown option --x for 'dump'", help: 'pq dump --help' });
    r = pq(['stats', '--json', join(work, 'nope')]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr)).toMatchObject({ code: 'ERR_NOT_FOUND', message: expect.stringContaining('no such directory') });
    r = pq(['frobnicate', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stderr)).toMatchObject({ code: 'ERR_USAGE' });
    r = pq(['dump', dir, '--json', '--format', 'text']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stderr)).toMatchObject({
      code: 'ERR_USAGE',
      message: '--json prints JSON Lines; it cannot be combined with --format text',
    });
  });

  it('aMissingStoreIsAnErrorAndStaysMissing', () => {
    const missing = join(work, 'nope');
    for (const args of [['stats'], ['dump'], ['verify'], ['pop'], ['compact'], ['pop', '--no-ack'], ['push', 'x']]) {
      const [command, ...rest] = args as [string, ...string[]];
      const r = pq([command, missing, ...rest]);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toMatch(/^pq: ERR_NOT_FOUND: No store at .*: no such directory.*\n$/);
      expect(existsSync(missing), `${args.join(' ')} created nothing`).toBe(false);
    }
  });

  it('anEmptyDirectoryIsNotAStoreAndStaysEmpty', () => {
    const empty = join(work, 'empty');
    mkdirSync(empty);
    for (const args of [['stats'], ['dump'], ['verify'], ['pop'], ['compact'], ['push', 'x']]) {
      const [command, ...rest] = args as [string, ...string[]];
      const r = pq([command, empty, ...rest]);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toMatch(/^pq: ERR_NOT_FOUND: No store at .*: the directory holds no segment or cursor file.*\n$/);
      expect(readdirSync(empty), `${args.join(' ')} created nothing`).toEqual([]);
    }
  });

  it('pushCreatesAStoreOnlyWithCreate', () => {
    let r = pq(['push', dir, 'x']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('--create');
    expect(existsSync(dir)).toBe(false);
    // No process has the queue open: the item is spooled in the new store directory.
    r = pq(['push', dir, 'x', '--create']);
    expect(r).toMatchObject({
      code: 0,
      stdout: 'spooled 1 item(s): no process serves the queue now; the one that takes them in gives them seqs\n',
    });
    expect(readdirSync(dir)).toEqual(['spool']);
    // Once the store exists (its spool is enough), --create is not needed and changes nothing.
    expect(pq(['push', dir, 'y'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
    expect(pq(['push', dir, 'z', '--create'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
    // Each run spooled a file of its own; files are taken in one after the other, in no set order.
    const popped = pq(['pop', dir, '--count', '5'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; text: string });
    expect(popped.map((p) => p.seq)).toEqual([1, 2, 3]);
    expect(popped.map((p) => p.text).sort()).toEqual(['x', 'y', 'z']);
  });

  it('pqPushWithNothingOnStdinIsAUsageError', () => {
    pushStored(dir, ['--create', 'x']);
    // As `pq push q < /dev/null`: stdin ends at once.
    const r = pq(['push', dir], '');
    expect(r).toMatchObject({ code: 2, stdout: '' });
    expect(r.stderr).toMatch(
      /^pq: pq push got nothing to push: give DATA arguments, or lines on stdin \(stdin was empty\) \(see pq push --help\)\n$/,
    );
    expect(JSON.parse(pq(['push', dir, '--json'], '').stderr)).toMatchObject({ code: 'ERR_USAGE', help: 'pq push --help' });
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ nextSeq: 2 });
    // With --create, no store is made for nothing.
    const other = join(work, 'other');
    expect(pq(['push', other, '--create'], '').code).toBe(2);
    expect(existsSync(other)).toBe(false);
    // A missing store is still reported as such, before stdin is read.
    expect(pq(['push', other], '')).toMatchObject({ code: 1, stderr: expect.stringMatching(/ERR_NOT_FOUND.*--create/) });
    // One empty line is one empty item: something was given.
    expect(pq(['push', dir], '\n')).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
    takeSpoolIn(dir);
    expect(JSON.parse(pq(['dump', dir, '--from', '2']).stdout)).toMatchObject({ seq: 2, bytes: 0, text: '' });
  });

  it('pushWithAKeyStoresOnceAndPrintsTheFirstSeqAgain', async () => {
    let owner = await serveQueue(work, dir);
    try {
      expect(pq(['push', dir, 'job-a', '--key', 'order-17'])).toMatchObject({ code: 0, stdout: '1\n' });
      expect(pq(['push', dir, 'job-b'])).toMatchObject({ code: 0, stdout: '2\n' });
      // The same key again, from another process: nothing is stored, the first push's seq is printed.
      expect(pq(['push', dir, 'job-a again', '--key', 'order-17'])).toMatchObject({ code: 0, stdout: '1\n' });
      expect(JSON.parse(pq(['push', dir, 'x', '--key', 'order-17', '--json']).stdout)).toEqual({ count: 1, seqs: [1], via: 'endpoint' });
    } finally {
      await closeQueue(owner);
    }
    // Still remembered once the item is acked.
    expect(pq(['pop', dir, '--count', '2'])).toMatchObject({ code: 0 });
    // Spooled with a key the store remembers: taken in, it stores nothing.
    expect(pq(['push', dir, 'job-a once more', '--key', 'order-17'])).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^spooled 1 item/),
    });
    takeSpoolIn(dir);
    owner = await serveQueue(work, dir);
    try {
      expect(pq(['push', dir, 'job-a yet again', '--key', 'order-17'])).toMatchObject({ code: 0, stdout: '1\n' });
      expect(pq(['push', dir, 'job-c', '--key', 'order-18'])).toMatchObject({ code: 0, stdout: '3\n' });
    } finally {
      await closeQueue(owner);
    }
    const rows = pq(['dump', dir])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; text: string });
    expect(rows.map((r) => [r.seq, r.text])).toEqual([[3, 'job-c']]);
  });

  it('aBadKeyOrAKeyWithoutExactlyOneDataIsAUsageErrorThatCreatesNothing', () => {
    for (const args of [
      ['push', dir, '--create', '--key', ''],
      ['push', dir, 'a', 'b', '--create', '--key', 'k'],
      ['push', dir, 'a', '--create', '--key', 'x'.repeat(256)],
      ['push', dir, 'a', '--create', '--key', 'k1', '--key', 'k2'],
    ]) {
      const r = pq(args, 'from stdin\n');
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/--key/);
      expect(existsSync(dir), `${args.join(' ')} created nothing`).toBe(false);
    }
  });

  it('aPathThatIsNotAQueueIsErrStore', () => {
    const file = join(work, 'file.txt');
    writeFileSync(file, 'hello');
    let r = pq(['stats', file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^pq: ERR_STORE: .+\n$/);
    const foreign = join(work, 'foreign');
    pushStored(foreign, ['--create', 'x']);
    writeFileSync(join(foreign, 'notes.txt'), 'mine');
    r = pq(['stats', foreign]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^pq: ERR_STORE: .+\n$/);
  });

  it('aCorruptStoreNamesFileAndOffset', () => {
    pushStored(dir, ['--create', 'one', 'two', 'three']);
    const seg = join(dir, segments(dir)[0]!);
    const bytes = readFileSync(seg);
    bytes[bytes.indexOf(Buffer.from('one'))] ^= 0x40;
    writeFileSync(seg, bytes);
    const r = pq(['dump', dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/ERR_CORRUPT/);
    expect(r.stderr).toMatch(/seg-\d+\.log/);
    expect(r.stderr).toMatch(/offset \d+/);
  });

  it('aNewerFormatVersionIsRefused', () => {
    pushStored(dir, ['--create', 'one']);
    const seg = join(dir, segments(dir)[0]!);
    const bytes = readFileSync(seg);
    bytes.writeUInt16LE(99, 4); // the version field of the segment header (FORMAT.md)
    writeFileSync(seg, bytes);
    const before = hashDir(dir);
    const r = pq(['stats', dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^pq: ERR_UNSUPPORTED_VERSION: .+\n$/);
    expect(hashDir(dir)).toBe(before);
  });

  it('aStoreHeldByAnotherProcessNamesItsPidToWritersAndStaysReadable', async () => {
    pushStored(dir, ['--create', 'x']);
    const holder: ChildProcess = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { LogStore } from ${JSON.stringify(pathToFileURL(join(root, 'dist', 'index.js')).href)};
         await LogStore.open(${JSON.stringify(dir)}); console.log('held'); setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await new Promise<void>((res, rej) => {
        holder.stdout!.on('data', (d) => String(d).includes('held') && res());
        holder.once('exit', () => rej(new Error('holder exited')));
      });
      // The holder serves nobody (it opened no queue): the commands that take the lock are refused.
      for (const args of [['pop'], ['compact']]) {
        const [command, ...rest] = args as [string, ...string[]];
        const r = pq([command, dir, ...rest]);
        expect(r.code, command).toBe(1);
        expect(r.stderr, command).toMatch(/ERR_LOCKED/);
        expect(r.stderr, command).toContain(String(holder.pid));
      }
      // Inspection takes no lock: it works beside the holder.
      const stats = pq(['stats', dir, '--json']);
      expect(stats.code, stats.stderr).toBe(0);
      expect(JSON.parse(stats.stdout)).toMatchObject({ unacked: 1 });
      expect(pq(['dump', dir, '--format', 'text'])).toMatchObject({ code: 0, stdout: 'x\n' });
      // A push takes no lock: it is spooled, for the next process that opens the queue.
      expect(pq(['push', dir, 'y'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
    } finally {
      holder.kill('SIGKILL');
      await new Promise((r) => holder.once('exit', r));
    }
    // A SIGKILLed holder leaves nothing that needs cleaning up.
    expect(pq(['pop', dir, '--count', '2', '--format', 'text'])).toMatchObject({ code: 0, stdout: 'x\ny\n' });
  });
});

describe('help, version and --json', () => {
  const commands = ['demo', 'stats', 'verify', 'salvage', 'dump', 'push', 'pop', 'compact'];

  it('everyCommandHasItsOwnHelp', () => {
    const top = pq(['--help']);
    expect(top.code).toBe(0);
    for (const command of commands) {
      const r = pq([command, '--help']);
      expect(r.code, command).toBe(0);
      expect(r.stdout, command).toMatch(new RegExp(`^Usage: pq ${command} `));
      expect(r.stdout, command).toContain('--json');
      expect(pq(['help', command]).stdout, command).toBe(r.stdout);
      expect(pq([command, '-h']).stdout, command).toBe(r.stdout);
      // pq --help lists the command with the same options as its own help.
      const synopsis = /^Usage: pq (.*) \[--json\]$/m.exec(r.stdout)![1]!;
      expect(top.stdout, command).toContain(`  ${synopsis}`);
    }
    // Help wins over the mistakes around it.
    expect(pq(['dump', '--x', '--limit', '-1', '--help'])).toMatchObject({ code: 0, stdout: pq(['dump', '--help']).stdout });
    expect(pq(['dump', '--help']).stdout).toMatch(/--from SEQ +start at this seq/);
    expect(pq(['push', '--help']).stdout).toMatch(/--create +create the store/);
  });

  it('theCliGuideListsExactlyTheCommandsOfPqHelp', () => {
    const guide = readFileSync(join(root, 'docs', 'guides', 'cli.md'), 'utf8');
    const section = guide.slice(guide.indexOf('# `pq`: the command line'));
    const block = /```\n(pq demo[\s\S]*?)```/.exec(section)![1]!;
    const help = pq(['--help']).stdout.split('\n');
    const listed: string[] = [];
    for (const line of help.slice(help.indexOf('Commands:') + 1, help.indexOf('', help.indexOf('Commands:')))) {
      // The guide writes each command after `pq `, one column further right.
      listed.push(line.startsWith('   ') ? ` ${line}` : `pq ${line.slice(2)}`);
    }
    expect(block).toBe([...listed, 'pq --version', ''].join('\n'));
  });

  it('versionIsThePackageVersion', () => {
    expect(pq(['--version'])).toMatchObject({ code: 0, stdout: `${pkg.version}\n` });
    expect(JSON.parse(pq(['--version', '--json']).stdout)).toEqual({ version: pkg.version });
  });

  it('everyStoreCommandPrintsJson', () => {
    expect(JSON.parse(pq(['push', dir, '--create', 'a', 'b', 'c', '--json']).stdout)).toEqual({ count: 3, seqs: null, via: 'spool' });
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({
      view: 'read-only',
      unacked: 0,
      spool: { files: 1, pendingRecords: 3 },
    });
    takeSpoolIn(dir);
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({
      view: 'read-only',
      unacked: 3,
      spool: { files: 0, pendingRecords: 0 },
    });
    expect(JSON.parse(pq(['verify', dir, '--json']).stdout)).toMatchObject({ problems: [] });
    const dumped = pq(['dump', dir, '--json'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(dumped.map((d) => d.text)).toEqual(['a', 'b', 'c']);
    expect(JSON.parse(pq(['pop', dir, '--json']).stdout)).toEqual({
      seq: 1,
      bytes: 1,
      priority: 0,
      notBefore: null,
      deliveries: 1,
      text: 'a',
    });
    expect(JSON.parse(pq(['compact', dir, '--json']).stdout)).toMatchObject({
      bytesReclaimed: expect.any(Number),
      segmentsDeleted: expect.any(Number),
      bytesOnDiskAfter: expect.any(Number),
      via: 'lock',
    });
  });
});

describe('progress', () => {
  /** Runs pq with its stdout going to `file`, as `pq dump q > file` does. */
  function pqToFile(args: string[], file: string, nodeArgs: string[] = []) {
    const fd = openSync(file, 'w');
    try {
      const r = spawnSync(process.execPath, [...nodeArgs, bin, ...args], {
        encoding: 'utf8',
        stdio: ['ignore', fd, 'pipe'],
        env: { ...process.env, NO_COLOR: '1' },
      });
      return { code: r.status, stdout: readFileSync(file, 'utf8'), stderr: r.stderr };
    } finally {
      closeSync(fd);
    }
  }

  it('progressIsShownOnlyWhenStderrIsATerminal', () => {
    pushStored(dir, ['--create'], Array.from({ length: 50 }, (_, i) => `item-${i}`).join('\n') + '\n');
    const file = join(work, 'out.txt');
    for (const [args, progress] of [
      [['verify', dir], /verifying \[#+\]/],
      [['dump', dir], /dumped 50 \/ 50 item\(s\)/],
      [['compact', dir], /compacting\.\.\./],
    ] as const) {
      // spawnSync gives the child a pipe for stderr, never a terminal: no progress.
      const quiet = pqToFile([...args], file);
      expect(quiet.code, args.join(' ')).toBe(0);
      expect(quiet.stderr, args.join(' ')).toBe('');
      const shown = pqToFile([...args], file, STDERR_IS_A_TTY);
      expect(shown.code, args.join(' ')).toBe(0);
      expect(shown.stderr, args.join(' ')).toMatch(progress);
      // The line is cleared again, and the output proper is the same.
      expect(shown.stderr.endsWith('\r\x1b[K'), args.join(' ')).toBe(true);
      expect(shown.stdout.replace(/reclaimed .*/, ''), args.join(' ')).toBe(quiet.stdout.replace(/reclaimed .*/, ''));
    }
    expect(readFileSync(file, 'utf8')).toMatch(/^reclaimed /);
    expect(pqToFile(['dump', dir], file).stdout.trim().split('\n')).toHaveLength(50);
  });

  it('compactShowsHowMuchOfTheRewriteIsDone', async () => {
    // Small segments, every other item acked: there are sealed segments to rewrite.
    const { LogStore } = (await import(pathToFileURL(join(root, 'dist', 'index.js')).href)) as typeof import('../../src/index.js');
    const store = await LogStore.open(dir, { segmentBytes: 4096, autoCompact: false });
    const { nextSeq: s } = await store.open();
    for (let b = 0; b < 20; b++)
      await store.append(
        Array.from({ length: 10 }, (_, i) => ({ seq: s + b * 10 + i, bytes: new Uint8Array(100) })),
        false,
      );
    await store.ack(
      Array.from({ length: 100 }, (_, i) => s + i * 2),
      true,
    );
    await store.close();
    const shown = pq(['compact', dir], undefined, STDERR_IS_A_TTY);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stderr).toMatch(/compacting \[#{30}\] [\d.]+ KiB \/ [\d.]+ KiB/);
    expect(shown.stdout).toMatch(/rewritten/);
  });

  it('dumpToATerminalShowsNoProgress', () => {
    pushStored(dir, ['--create', 'a']);
    // stdout is a pipe here and stderr claims a terminal: progress shows. It is the dump's own
    // output going to the terminal that turns it off, so both claim a terminal below.
    const both = [
      '--import',
      `data:text/javascript,${encodeURIComponent("for (const s of [process.stdout, process.stderr]) Object.defineProperty(s, 'isTTY', { value: true });")}`,
    ];
    expect(pq(['dump', dir], undefined, STDERR_IS_A_TTY).stderr).toMatch(/dumped 1 \/ 1/);
    expect(pq(['dump', dir], undefined, both).stderr).toBe('');
  });
});

describe('demo', () => {
  it('theDemoKillsTheProducerAndLosesNothing', () => {
    const r = spawnSync(process.execPath, [bin, 'demo', join(work, 'demo'), '--seconds', '2'], {
      encoding: 'utf8',
      env: { ...process.env, NO_COLOR: '1' },
    });
    expect(r.stderr).not.toMatch(/error|pq:/i);
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/SIGKILL/);
    expect(r.stdout).toMatch(/lost: 0/);
    const told = Number(/pushes the child saw resolve\s+([\d,]+)/.exec(r.stdout)![1]!.replaceAll(',', ''));
    expect(told).toBeGreaterThan(0);
    // It says what a SIGKILL shows, and where power loss is shown instead.
    expect(r.stdout).toMatch(/every acknowledged push survived the SIGKILL\nthat is a process crash, which 'none' survives too/);
    expect(r.stdout).toMatch(/power loss .* is what the simulated crash disk shows/);
    expect(r.stdout).toContain('README "Property-test your own crash recovery"');
  });

  it('everyDemoRunKillsWhileItemsAreWaitingAndRecoversThem', () => {
    for (let run = 0; run < 3; run++) {
      const json = run !== 0;
      const r = spawnSync(process.execPath, [bin, 'demo', '--seconds', '1', ...(json ? ['--json'] : [])], {
        encoding: 'utf8',
        env: { ...process.env, NO_COLOR: '1' },
      });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      if (json) {
        const result = JSON.parse(r.stdout) as { ok: boolean; waitingAtKill: number; recovered: number; lost: number };
        expect(result).toMatchObject({ ok: true, lost: 0 });
        expect(result.waitingAtKill, r.stdout).toBeGreaterThan(0);
        expect(result.recovered, r.stdout).toBeGreaterThanOrEqual(result.waitingAtKill);
      } else {
        expect(r.stdout).not.toMatch(/seq - \.\. -/);
        expect(Number(/recovered and delivered now\s+([\d,]+)/.exec(r.stdout)![1]!.replaceAll(',', '')), r.stdout).toBeGreaterThan(0);
      }
    }
  });
});
