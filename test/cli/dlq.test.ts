/**
 * `pq dlq list | redrive | purge` as a user runs them: the built binary in a spawned process, on
 * a store whose dead letters were made through the library.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');
const distIndex = pathToFileURL(join(root, 'dist', 'index.js')).href;
const lib = (await import(distIndex)) as typeof import('../../src/index.js');

let work: string;
let dir: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-dlq-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [bin, ...args], {
    encoding: 'utf8',
    input,
    maxBuffer: 1 << 30,
    env: { ...process.env, NO_COLOR: '1' },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function hashDir(path: string): string {
  const h = createHash('sha256');
  for (const name of readdirSync(path).sort()) h.update(name).update(readFileSync(join(path, name)));
  return h.digest('hex');
}

const bytesOf = (p: string | Uint8Array): Uint8Array => (typeof p === 'string' ? new TextEncoder().encode(p) : p);

/**
 * Push `payloads`, then take each one and dead-letter it with its reason, as a consumer does:
 * Builder + LogStore + `item.deadLetter(reason)`. The first `keep` items stay in the queue.
 */
async function deadLetterThroughTheQueue(payloads: (string | Uint8Array)[], reasons: string[], keep = 0): Promise<void> {
  const [tx, rx] = await new lib.Builder(await lib.LogStore.open(dir)).open();
  try {
    await tx.pushMany(payloads.map(bytesOf));
    const items = [];
    for (let i = 0; i < payloads.length; i++) items.push((await rx.reserve())!);
    for (let i = 0; i < keep; i++) await items[i]!.nack();
    for (let i = keep; i < items.length; i++) await items[i]!.deadLetter(reasons[i - keep]);
  } finally {
    await tx.close();
  }
}

/** Dead letters with exact fields (times included), written through the store's own contract in one batch. */
async function deadLetterThroughTheStore(
  letters: { bytes: Uint8Array; deliveries: number; firstDeliveredAt: number; lastDeliveredAt: number; deadAt: number; reason: string }[],
): Promise<number[]> {
  const store = await lib.LogStore.open(dir);
  try {
    const { nextSeq } = await store.open();
    const items = letters.map((l, i) => ({ seq: nextSeq + i, bytes: l.bytes }));
    await store.append(items, true);
    await store.deadLetter(letters.map((l, i) => ({ ...l, seq: nextSeq + i })));
    return items.map((i) => i.seq);
  } finally {
    await store.close();
  }
}

/** The dead letters as the library sees them, read without changing the store. */
async function libraryDeadLetters(): Promise<import('../../src/index.js').DeadLetter[]> {
  const store = await lib.LogStore.open(dir, { readOnly: true });
  try {
    return [...store.readDeadLetters({ after: 0, limit: 1_000_000 })];
  } finally {
    await store.close();
  }
}

const jsonLines = (text: string): Record<string, unknown>[] =>
  text
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l));

const T0 = Date.UTC(2025, 5, 2, 9, 14, 3, 120);

describe('pq dlq list', () => {
  it('listPrintsOneLinePerDeadLetterWithTimesReasonAndPayload', async () => {
    await deadLetterThroughTheStore([
      {
        bytes: bytesOf('hello'),
        deliveries: 3,
        firstDeliveredAt: T0,
        lastDeliveredAt: T0 + 1000,
        deadAt: T0 + 1001,
        reason: 'handler threw: boom',
      },
      { bytes: new Uint8Array([0, 255, 1]), deliveries: 0, firstDeliveredAt: 0, lastDeliveredAt: 0, deadAt: T0 + 2000, reason: '' },
    ]);
    const r = pq(['dlq', 'list', dir]);
    expect(r, r.stderr).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toBe(
      'seq 1  deliveries 3  first 2025-06-02T09:14:03.120Z  last 2025-06-02T09:14:04.120Z  dead 2025-06-02T09:14:04.121Z  reason "handler threw: boom"  5 B "hello"\n' +
        'seq 2  deliveries 0  first -  last -  dead 2025-06-02T09:14:05.120Z  reason ""  3 B base64 AP8B\n',
    );
    const json = pq(['dlq', 'list', dir, '--json']);
    expect(json.code).toBe(0);
    expect(jsonLines(json.stdout)).toEqual([
      {
        seq: 1,
        bytes: 5,
        deliveries: 3,
        firstDeliveredAt: '2025-06-02T09:14:03.120Z',
        lastDeliveredAt: '2025-06-02T09:14:04.120Z',
        deadAt: '2025-06-02T09:14:04.121Z',
        reason: 'handler threw: boom',
        text: 'hello',
      },
      {
        seq: 2,
        bytes: 3,
        deliveries: 0,
        firstDeliveredAt: null,
        lastDeliveredAt: null,
        deadAt: '2025-06-02T09:14:05.120Z',
        reason: '',
        base64: 'AP8B',
      },
    ]);
  });

  it('payloadsAndReasonsThatWouldActOnTheTerminalAreEscapedAndReadBackExactly', async () => {
    // An escape sequence, a newline, a C1 CSI (0x9b as a UTF-8 character), a bidi override, and
    // bytes that are not UTF-8 (a raw 0x9b and 0x1b among them), plus a reason longer than a store keeps.
    const payloads = [
      'red \x1b[31mRED\x1b[0m\nsecond line',
      'csi \u009b2J and \u202eesrever',
      new Uint8Array([0x1b, 0x5b, 0x32, 0x4a, 0x9b, 0xff, 0x00, 0x0a]),
    ];
    const long = 'why '.repeat(600);
    const reasons = ['line one\nline two\ttabbed \x1b]0;title\x07', long, 'binary'];
    await deadLetterThroughTheQueue(payloads, reasons);
    const stored = await libraryDeadLetters();
    expect(stored).toHaveLength(3);
    // The queue cuts a long reason to what a store keeps; pq shows exactly what is stored.
    expect(Buffer.byteLength(stored[1]!.reason)).toBe(1024);

    const r = pq(['dlq', 'list', dir]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines.pop()).toBe('');
    expect(lines, 'one line per dead letter').toHaveLength(3);
    // Nothing a terminal acts on: no C0 control but the line ends, no DEL, no C1, no bidi control.
    expect(r.stdout).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/);
    const quotedStrings = (line: string): string[] => [...line.matchAll(/"(?:[^"\\]|\\.)*"/g)].map((m) => JSON.parse(m[0]) as string);
    for (let i = 0; i < 2; i++) {
      expect(lines[i]).toMatch(new RegExp(`^seq ${stored[i]!.seq}  deliveries 1  first \\S+Z  last \\S+Z  dead \\S+Z  reason "`));
      expect(quotedStrings(lines[i]!), `line ${i}`).toEqual([stored[i]!.reason, payloads[i]]);
    }
    expect(quotedStrings(lines[2]!)).toEqual(['binary']);
    expect(lines[2]).toMatch(/ {2}8 B base64 (\S+)$/);
    expect(Buffer.from(/base64 (\S+)$/.exec(lines[2]!)![1]!, 'base64')).toEqual(Buffer.from(payloads[2] as Uint8Array));

    const json = jsonLines(pq(['dlq', 'list', dir, '--json']).stdout);
    expect(json.map((j) => j.reason)).toEqual(stored.map((d) => d.reason));
    expect(json.map((j) => j.text ?? Buffer.from(j.base64 as string, 'base64'))).toEqual([
      payloads[0],
      payloads[1],
      Buffer.from(payloads[2] as Uint8Array),
    ]);
    for (const [i, j] of json.entries()) {
      expect(j).toMatchObject({ seq: stored[i]!.seq, bytes: stored[i]!.bytes.length, deliveries: 1 });
      expect(j.deadAt).toBe(new Date(stored[i]!.deadAt).toISOString());
      expect(j.firstDeliveredAt).toBe(new Date(stored[i]!.firstDeliveredAt).toISOString());
    }
  });

  it('afterAndLimitPickAWindowInSeqOrder', async () => {
    await deadLetterThroughTheQueue(['a', 'b', 'c', 'd', 'e'], ['r1', 'r2', 'r3', 'r4', 'r5'], 1);
    // seq 1 stayed in the queue; 2..5 are dead letters.
    const seqs = (args: string[]): unknown[] => jsonLines(pq(['dlq', 'list', dir, '--json', ...args]).stdout).map((j) => j.seq);
    expect(seqs([])).toEqual([2, 3, 4, 5]);
    expect(seqs(['--after', '2'])).toEqual([3, 4, 5]);
    expect(seqs(['--after', '3', '--limit', '1'])).toEqual([4]);
    expect(seqs(['--limit', '2'])).toEqual([2, 3]);
    expect(seqs(['--after', '5'])).toEqual([]);
    expect(pq(['dlq', 'list', dir, '--after', '0', '--limit', '1']).stdout).toMatch(/^seq 2 {2}.* 1 B "b"\n$/);
  });

  it('aStoreWithoutDeadLettersPrintsNothing', async () => {
    expect(pq(['push', dir, '--create', 'x']).code).toBe(0);
    expect(pq(['dlq', 'list', dir])).toEqual({ code: 0, stdout: '', stderr: '' });
    expect(pq(['dlq', 'list', dir, '--json'])).toEqual({ code: 0, stdout: '', stderr: '' });
    await deadLetterThroughTheQueue(['y'], ['r']);
    expect(pq(['dlq', 'purge', dir, '--yes']).code).toBe(0);
    expect(pq(['dlq', 'list', dir])).toEqual({ code: 0, stdout: '', stderr: '' });
  });

  it('listChangesNothingAndWorksBesideAHolderWhileRedriveAndPurgeAreRefused', async () => {
    await deadLetterThroughTheQueue(['a', 'b'], ['r1', 'r2']);
    const before = hashDir(dir);
    expect(pq(['dlq', 'list', dir]).code).toBe(0);
    expect(hashDir(dir), 'list wrote nothing').toBe(before);
    const holder: ChildProcess = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { LogStore } from ${JSON.stringify(distIndex)}; await LogStore.open(${JSON.stringify(dir)}); console.log('held'); setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await new Promise<void>((res, rej) => {
        holder.stdout!.on('data', (d) => String(d).includes('held') && res());
        holder.once('exit', () => rej(new Error('holder exited')));
      });
      const held = hashDir(dir);
      const list = pq(['dlq', 'list', dir, '--json']);
      expect(list.code, list.stderr).toBe(0);
      expect(jsonLines(list.stdout).map((j) => j.text)).toEqual(['a', 'b']);
      for (const args of [['redrive'], ['purge', '--yes'], ['purge', '--seq', '1']]) {
        const r = pq(['dlq', ...args.slice(0, 1), dir, ...args.slice(1)]);
        expect(r.code, args.join(' ')).toBe(1);
        expect(r.stdout, args.join(' ')).toBe('');
        expect(r.stderr, args.join(' ')).toMatch(/^pq: ERR_LOCKED: .*\n$/);
        expect(r.stderr, args.join(' ')).toContain(String(holder.pid));
        const j = pq(['dlq', ...args.slice(0, 1), dir, ...args.slice(1), '--json']);
        expect(JSON.parse(j.stderr), args.join(' ')).toMatchObject({ code: 'ERR_LOCKED', pid: holder.pid });
      }
      expect(hashDir(dir), 'the refused commands changed nothing').toBe(held);
    } finally {
      holder.kill('SIGKILL');
      await new Promise((r) => holder.once('exit', r));
    }
    expect((await libraryDeadLetters()).map((d) => d.seq)).toEqual([1, 2]);
  });
});

describe('pq dlq redrive', () => {
  it('redriveMovesEveryDeadLetterBackAsNewItems', async () => {
    const binary = new Uint8Array([0, 159, 255]);
    await deadLetterThroughTheQueue(['keep', 'a', binary, 'c'], ['r1', 'r2', 'r3'], 1);
    const r = pq(['dlq', 'redrive', dir]);
    expect(r).toEqual({ code: 0, stdout: 'redrove 3 dead letter(s): seqs 2..4 -> seqs 5..7\n', stderr: '' });
    expect(pq(['dlq', 'list', dir]).stdout).toBe('');
    expect(await libraryDeadLetters()).toEqual([]);
    // `pq pop` sees them, after the item that stayed, with fresh delivery counts.
    const popped = jsonLines(pq(['pop', dir, '--count', '10', '--json']).stdout);
    expect(popped).toEqual([
      { seq: 1, bytes: 4, priority: 0, notBefore: null, deliveries: 2, text: 'keep' },
      { seq: 5, bytes: 1, priority: 0, notBefore: null, deliveries: 1, text: 'a' },
      { seq: 6, bytes: 3, priority: 0, notBefore: null, deliveries: 1, base64: Buffer.from(binary).toString('base64') },
      { seq: 7, bytes: 1, priority: 0, notBefore: null, deliveries: 1, text: 'c' },
    ]);
    expect(pq(['dlq', 'redrive', dir])).toEqual({ code: 0, stdout: 'redrove 0 dead letters\n', stderr: '' });
  });

  it('seqAndLimitChooseWhichAndTheLibrarySeesTheResult', async () => {
    await deadLetterThroughTheQueue(['a', 'b', 'c', 'd', 'e'], ['r1', 'r2', 'r3', 'r4', 'r5']);
    // Repeated --seq, a duplicate, and seqs that are not dead letters (reported, skipped).
    let r = pq(['dlq', 'redrive', dir, '--seq', '4', '--seq', '2', '--seq', '4', '--seq', '99', '--seq', '100']);
    expect(r).toEqual({
      code: 0,
      stdout: 'redrove 2 dead letter(s): seqs 2, 4 -> seqs 6..7\nnot dead letters, skipped: seqs 99..100\n',
      stderr: '',
    });
    r = pq(['dlq', 'redrive', dir, '--limit', '1', '--json']);
    expect(JSON.parse(r.stdout)).toEqual({ count: 1, seqs: [8], from: [1], skipped: [], via: 'lock' });
    r = pq(['dlq', 'redrive', dir, '--seq', '5', '--seq', '3', '--limit', '1', '--json']);
    expect(JSON.parse(r.stdout)).toEqual({ count: 1, seqs: [9], from: [3], skipped: [], via: 'lock' });
    expect((await libraryDeadLetters()).map((d) => [d.seq, d.reason])).toEqual([[5, 'r5']]);
    const [tx, rx] = await new lib.Builder(await lib.LogStore.open(dir)).open();
    try {
      const seen: [number, string][] = [];
      for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) seen.push([item.seq, new TextDecoder().decode(item.bytes)]);
      expect(seen).toEqual([
        [6, 'b'],
        [7, 'd'],
        [8, 'a'],
        [9, 'c'],
      ]);
      expect(rx.deadLetters.count()).toBe(1);
    } finally {
      await tx.close();
    }
  });
});

describe('pq dlq purge', () => {
  it('purgingEveryDeadLetterNeedsYesAndWithoutItChangesNothing', async () => {
    await deadLetterThroughTheQueue(['a', 'b', 'c'], ['r1', 'r2', 'r3']);
    const before = hashDir(dir);
    const r = pq(['dlq', 'purge', dir]);
    expect(r).toEqual({
      code: 2,
      stdout: '',
      stderr: 'pq: without --seq or --limit, pq dlq purge deletes every dead letter: pass --yes to confirm (see pq dlq purge --help)\n',
    });
    expect(JSON.parse(pq(['dlq', 'purge', dir, '--json']).stderr)).toMatchObject({ code: 'ERR_USAGE', help: 'pq dlq purge --help' });
    expect(hashDir(dir)).toBe(before);
    expect(pq(['dlq', 'purge', dir, '--yes'])).toEqual({ code: 0, stdout: 'purged 3 dead letter(s): seqs 1..3\n', stderr: '' });
    expect(await libraryDeadLetters()).toEqual([]);
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ unacked: 0, deadLetters: 0 });
    expect(pq(['dlq', 'purge', dir, '--yes', '--json'])).toEqual({
      code: 0,
      stdout: '{"count":0,"seqs":[],"skipped":[],"via":"lock"}\n',
      stderr: '',
    });
  });

  it('seqAndLimitPurgeOnlyWhatTheyName', async () => {
    await deadLetterThroughTheQueue(['a', 'b', 'c', 'd', 'e'], ['r1', 'r2', 'r3', 'r4', 'r5'], 1);
    expect(pq(['dlq', 'purge', dir, '--seq', '3', '--seq', '5', '--seq', '1'])).toEqual({
      code: 0,
      // seq 1 is in the queue, not a dead letter: purge never touches queue items.
      stdout: 'purged 2 dead letter(s): seqs 3, 5\nnot dead letters, skipped: seq 1\n',
      stderr: '',
    });
    expect(JSON.parse(pq(['dlq', 'purge', dir, '--limit', '1', '--json']).stdout)).toEqual({
      count: 1,
      seqs: [2],
      skipped: [],
      via: 'lock',
    });
    expect((await libraryDeadLetters()).map((d) => d.seq)).toEqual([4]);
    expect(pq(['dump', dir, '--format', 'text']).stdout).toBe('a\n');
  });
});

describe('bad input changes nothing', () => {
  it('usageMistakesAreOneLineExitTwoAndLeaveTheStoreAsItWas', async () => {
    await deadLetterThroughTheQueue(['a', 'b'], ['r1', 'r2']);
    const before = hashDir(dir);
    const cases: [string[], string][] = [
      [['dlq'], 'pq: pq dlq needs a command before its arguments: list, redrive or purge (see pq dlq --help)'],
      [['dlq', dir], "pq: unknown command 'dlq " + dir + "': the dlq commands are list, redrive or purge (see pq dlq --help)"],
      [['dlq', '--yes', 'purge', dir], 'pq: pq dlq needs a command before its arguments: list, redrive or purge (see pq dlq --help)'],
      [['dlq', 'frob', dir], "pq: unknown command 'dlq frob': the dlq commands are list, redrive or purge (see pq dlq --help)"],
      [['dlq', 'list'], 'pq: pq dlq list takes exactly one <dir>, got 0 (see pq dlq list --help)'],
      [['dlq', 'redrive'], 'pq: pq dlq redrive takes exactly one <dir>, got 0 (see pq dlq redrive --help)'],
      [['dlq', 'purge', '--yes'], 'pq: pq dlq purge takes exactly one <dir>, got 0 (see pq dlq purge --help)'],
      [['dlq', 'purge', dir, dir, '--yes'], 'pq: pq dlq purge takes exactly one <dir>, got 2 (see pq dlq purge --help)'],
      [['dlq', 'list', dir, '--bogus'], "pq: unknown option --bogus for 'dlq list' (see pq dlq list --help)"],
      [['dlq', 'list', dir, '--seq', '1'], "pq: unknown option --seq for 'dlq list' (see pq dlq list --help)"],
      [['dlq', 'redrive', dir, '--yes'], "pq: unknown option --yes for 'dlq redrive' (see pq dlq redrive --help)"],
      [['dlq', 'list', dir, '--after', '-1'], "pq: --after must be an integer >= 0, got '-1' (see pq dlq list --help)"],
      [['dlq', 'list', dir, '--limit', '0'], "pq: --limit must be an integer >= 1, got '0' (see pq dlq list --help)"],
      [['dlq', 'redrive', dir, '--seq', 'x'], "pq: --seq must be an integer >= 1, got 'x' (see pq dlq redrive --help)"],
      [['dlq', 'redrive', dir, '--seq', '1.5'], "pq: --seq must be an integer >= 1, got '1.5' (see pq dlq redrive --help)"],
      [['dlq', 'redrive', dir, '--seq', '1', '--seq', '0'], "pq: --seq must be an integer >= 1, got '0' (see pq dlq redrive --help)"],
      [['dlq', 'purge', dir, '--seq', '-2'], "pq: --seq must be an integer >= 1, got '-2' (see pq dlq purge --help)"],
      [['dlq', 'purge', dir, '--seq'], 'pq: option --seq needs a value (SEQ) (see pq dlq purge --help)'],
      [['dlq', 'purge', dir, '--seq', '--yes'], 'pq: option --seq needs a value (SEQ) (see pq dlq purge --help)'],
      [['dlq', 'purge', dir, '--limit', '0'], "pq: --limit must be an integer >= 1, got '0' (see pq dlq purge --help)"],
      [['dlq', 'purge', dir, '--yes=no'], "pq: option --yes takes no value, got 'no' (see pq dlq purge --help)"],
      [['dlq', 'redrive', dir, '--wait', 'soon'], "pq: --wait must be an integer >= 0, got 'soon' (see pq dlq redrive --help)"],
    ];
    for (const [args, message] of cases) {
      const r = pq(args);
      expect(r, args.join(' ')).toEqual({ code: 2, stdout: '', stderr: `${message}\n` });
    }
    expect(JSON.parse(pq(['dlq', 'redrive', dir, '--seq', 'x', '--json']).stderr)).toEqual({
      code: 'ERR_USAGE',
      message: "--seq must be an integer >= 1, got 'x'",
      help: 'pq dlq redrive --help',
    });
    expect(JSON.parse(pq(['dlq', '--json']).stderr)).toMatchObject({ code: 'ERR_USAGE', help: 'pq dlq --help' });
    expect(hashDir(dir)).toBe(before);
    expect((await libraryDeadLetters()).map((d) => d.seq)).toEqual([1, 2]);
  });

  it('aWrongPathIsAnErrorAndCreatesNothing', () => {
    const missing = join(work, 'nope');
    const empty = join(work, 'empty');
    mkdirSync(empty);
    const file = join(work, 'file.txt');
    writeFileSync(file, 'hello');
    for (const args of [['list'], ['redrive'], ['purge', '--yes'], ['purge', '--seq', '1']]) {
      const run = (path: string) => pq(['dlq', args[0]!, path, ...args.slice(1)]);
      let r = run(missing);
      expect(r, args.join(' ')).toMatchObject({ code: 1, stdout: '' });
      expect(r.stderr, args.join(' ')).toMatch(/^pq: ERR_NOT_FOUND: No store at .*: no such directory\n$/);
      expect(existsSync(missing), `${args.join(' ')} created nothing`).toBe(false);
      r = run(empty);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toMatch(/^pq: ERR_NOT_FOUND: No store at .*: the directory holds no segment or cursor file.*\n$/);
      expect(readdirSync(empty), `${args.join(' ')} left the directory empty`).toEqual([]);
      r = run(file);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toMatch(/^pq: ERR_STORE: .+\n$/);
      expect(readFileSync(file, 'utf8')).toBe('hello');
    }
  });
});

describe('help', () => {
  it('theGroupAndEachCommandHaveTheirOwnHelp', () => {
    const group = pq(['dlq', '--help']);
    expect(group.code).toBe(0);
    expect(group.stdout).toMatch(/^Usage: pq dlq <list\|redrive\|purge> <dir> \[options\]\n/);
    expect(group.stdout).toMatch(/^ {2}dlq list +print dead letters/m);
    expect(pq(['dlq', '-h']).stdout).toBe(group.stdout);
    expect(pq(['help', 'dlq']).stdout).toBe(group.stdout);
    const top = pq(['--help']).stdout;
    for (const command of ['list', 'redrive', 'purge']) {
      const r = pq(['dlq', command, '--help']);
      expect(r.code, command).toBe(0);
      expect(r.stdout, command).toMatch(new RegExp(`^Usage: pq dlq ${command} <dir> .*\\[--json\\]\\n`));
      expect(pq(['help', 'dlq', command]).stdout, command).toBe(r.stdout);
      expect(pq(['dlq', command, dir, '--bogus', '-h']).stdout, 'help wins over mistakes').toBe(r.stdout);
      const synopsis = /^Usage: pq (.*) \[--json\]$/m.exec(r.stdout)![1]!;
      expect(top, command).toContain(`  ${synopsis}`);
    }
    expect(pq(['dlq', 'purge', '--help']).stdout).toMatch(/--seq SEQ +only the dead letter with this seq \(repeat for more\)/);
    expect(pq(['dlq', 'purge', '--help']).stdout).toMatch(/--yes +confirm deleting every dead letter/);
    expect(pq(['dlq', 'list', '--help']).stdout).toMatch(/read-only: takes no lock/);
  });
});

describe('pipes', () => {
  /** Run pq with its stdout read by this process; the reader leaves after `stopAfter` lines, as `head` does. */
  function read(args: string[], stopAfter = Infinity): { exited: Promise<{ code: number | null; stderr: string }>; lines: string[] } {
    const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    const lines: string[] = [];
    let partial = '';
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop()!;
      for (const part of parts) if (lines.length < stopAfter) lines.push(part);
      if (lines.length >= stopAfter) child.stdout!.destroy();
    });
    const exited = new Promise<{ code: number | null; stderr: string }>((res) => child.once('close', (code) => res({ code, stderr })));
    return { exited, lines };
  }

  it('listIntoAReaderThatLeavesAfterOneLineExitsQuietlyAndLosesNothing', async () => {
    const count = 3_000;
    // About 1 MiB of output, far more than a pipe buffers: pq is still writing when the reader leaves.
    const filler = 'x'.repeat(300);
    await deadLetterThroughTheStore(
      Array.from({ length: count }, (_, i) => ({
        bytes: bytesOf(`${i + 1} ${filler}`),
        deliveries: 1,
        firstDeliveredAt: T0,
        lastDeliveredAt: T0,
        deadAt: T0,
        reason: 'r',
      })),
    );
    const before = hashDir(dir);
    for (const json of [false, true]) {
      const head = read(['dlq', 'list', dir, ...(json ? ['--json'] : [])], 1);
      const { code, stderr } = await head.exited;
      expect(stderr, 'no EPIPE stack trace').toBe('');
      expect(code).toBe(0);
      expect(head.lines).toHaveLength(1);
      expect(head.lines[0]).toMatch(json ? /^\{"seq":1,/ : /^seq 1 {2}/);
    }
    expect(hashDir(dir), 'the store is as it was').toBe(before);
    const all = read(['dlq', 'list', dir, '--json']);
    expect(await all.exited).toEqual({ code: 0, stderr: '' });
    expect(all.lines.map((l) => (JSON.parse(l) as { seq: number }).seq)).toEqual(Array.from({ length: count }, (_, i) => i + 1));
  });
});
