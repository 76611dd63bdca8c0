/** `pq` as a user runs it: the built binary in a spawned process, on a real directory. */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let dir: string;
let work: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', input, env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function hashDir(path: string): string {
  const h = createHash('sha256');
  for (const name of readdirSync(path).sort()) h.update(name).update(readFileSync(join(path, name)));
  return h.digest('hex');
}

function segments(path: string): string[] {
  return readdirSync(path).filter((n) => n.startsWith('seg-')).sort();
}

describe('push, dump, pop, stats', () => {
  it('pushesArgumentsAndStdinLinesAndDumpsThemWithoutConsuming', () => {
    expect(pq(['push', dir, 'alpha', 'beta'])).toMatchObject({ code: 0, stdout: '1\n2\n' });
    expect(pq(['push', dir], 'gamma\ndelta\n')).toMatchObject({ code: 0, stdout: '3\n4\n' });
    const jsonl = pq(['dump', dir]);
    expect(jsonl.code).toBe(0);
    const rows = jsonl.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(rows.map((r) => [r.seq, r.text])).toEqual([
      [1, 'alpha'],
      [2, 'beta'],
      [3, 'gamma'],
      [4, 'delta'],
    ]);
    expect(pq(['dump', dir, '--from', '2', '--limit', '2', '--format', 'text']).stdout).toBe('beta\ngamma\n');
    expect(pq(['dump', dir, '--from', '4', '--format', 'hex']).stdout).toBe(`4\t${Buffer.from('delta').toString('hex')}\n`);
    // dump consumed nothing
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ ready: 4, firstSeq: 1, nextSeq: 5 });
  });

  it('popAcksUnlessNoAck', () => {
    pq(['push', dir, 'a', 'b', 'c']);
    expect(pq(['pop', dir, '--no-ack'])).toMatchObject({ code: 0, stdout: 'a\n' });
    expect(pq(['pop', dir, '--count', '2'])).toMatchObject({ code: 0, stdout: 'a\nb\n' });
    const stats = JSON.parse(pq(['stats', dir, '--json']).stdout);
    expect(stats).toMatchObject({ ready: 1, firstSeq: 3, nextSeq: 4, formatVersion: 1, lastShutdownClean: true });
    expect(pq(['pop', dir, '--count', '5', '--format', 'jsonl']).stdout.trim()).toBe(
      JSON.stringify({ seq: 3, bytes: 1, deliveries: 1, text: 'c' }),
    );
    expect(pq(['pop', dir]).stdout).toBe('');
  });

  it('statsPrintsAReadableSummary', () => {
    pq(['push', dir, 'x']);
    const r = pq(['stats', dir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/items ready\s+1/);
    expect(r.stdout).toMatch(/format version\s+1/);
    expect(r.stdout).toMatch(/last shutdown\s+clean/);
  });

  it('compactReportsBytesReclaimed', () => {
    pq(['push', dir], Array.from({ length: 200 }, (_, i) => `item-${i}`).join('\n') + '\n');
    pq(['pop', dir, '--count', '200']);
    const r = pq(['compact', dir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^reclaimed .*on disk\n$/);
  });
});

describe('verify', () => {
  it('aSoundStoreVerifiesWithExitZeroAndChangesNothing', () => {
    pq(['push', dir, 'one', 'two']);
    const before = hashDir(dir);
    const r = pq(['verify', dir]);
    expect(r).toMatchObject({ code: 0 });
    expect(r.stdout).toMatch(/sound/);
    expect(hashDir(dir)).toBe(before);
    expect(JSON.parse(pq(['verify', dir, '--json']).stdout)).toMatchObject({ problems: [] });
  });

  it('aFlippedByteIsReportedWithFileAndOffsetAndExitOne', () => {
    pq(['push', dir, 'one', 'two', 'three']);
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
  it('usageErrorsExitTwoWithUsage', () => {
    for (const args of [[], ['frobnicate'], ['stats'], ['dump', dir, '--limit', 'x'], ['pop', dir, '--count', '0'], ['dump', dir, '--format', 'xml'], ['stats', dir, '--bogus']]) {
      const r = pq(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout + r.stderr, args.join(' ')).toMatch(/Usage: pq/);
    }
  });

  it('aMissingStoreIsAnError', () => {
    const r = pq(['stats', join(work, 'nope')]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('aPathThatIsNotAQueueIsErrStore', () => {
    const file = join(work, 'file.txt');
    writeFileSync(file, 'hello');
    let r = pq(['stats', file]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^pq: ERR_STORE: .+\n$/);
    const foreign = join(work, 'foreign');
    pq(['push', foreign, 'x']);
    writeFileSync(join(foreign, 'notes.txt'), 'mine');
    r = pq(['stats', foreign]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^pq: ERR_STORE: .+\n$/);
  });

  it('aCorruptStoreNamesFileAndOffset', () => {
    pq(['push', dir, 'one', 'two', 'three']);
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
    pq(['push', dir, 'one']);
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

  it('aStoreHeldByAnotherProcessNamesItsPid', async () => {
    pq(['push', dir, 'x']);
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
      const r = pq(['stats', dir]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/ERR_LOCKED/);
      expect(r.stderr).toContain(String(holder.pid));
    } finally {
      holder.kill('SIGKILL');
      await new Promise((r) => holder.once('exit', r));
    }
    // A SIGKILLed holder leaves nothing that needs cleaning up.
    expect(pq(['stats', dir, '--json']).code).toBe(0);
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
  });
});
