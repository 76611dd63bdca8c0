/**
 * `pq` writing into a pipe, as in `pq dump q | wc -l` and `pq pop q | head -1`: every line
 * arrives, memory stays flat, a reader that leaves early ends pq quietly, and pop acks only what
 * it handed over. The built binary runs in a child process whose stdout this process reads.
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { takeSpoolIn } from '../support/pq-cli.js';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let work: string;
let dir: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-pipes-'));
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

function pushLines(count: number, line: (i: number) => string): void {
  const input = Array.from({ length: count }, (_, i) => line(i + 1)).join('\n') + '\n';
  expect(pq(['push', dir, '--create', '--durability', 'none', '--json'], input).code).toBe(0);
  // Spooled, as no process has the queue open: taken in as the next open of the queue would.
  takeSpoolIn(dir);
}

function unacked(): { unacked: number; firstSeq: number | null; nextSeq: number } {
  return JSON.parse(pq(['stats', dir, '--json']).stdout) as { unacked: number; firstSeq: number | null; nextSeq: number };
}

interface Reader {
  /** Exit status and stderr of pq. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
  /** Lines read before the reader stopped. */
  lines: string[];
}

/**
 * Run pq with its stdout read by this process. `stopAfter` lines, the reader closes its end of
 * the pipe, as `head` does when it exits; `slow` makes it hand control back to the event loop
 * after every chunk, so pq outruns it and meets backpressure.
 */
function read(args: string[], { stopAfter = Infinity, slow = false, nodeArgs = [] as string[] } = {}): Reader {
  const child = spawn(process.execPath, [...nodeArgs, bin, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  const lines: string[] = [];
  let partial = '';
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const stdout = child.stdout!;
  if (stopAfter === 0) stdout.destroy();
  else {
    stdout.setEncoding('utf8').on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop()!;
      for (const part of parts) {
        if (lines.length === stopAfter) break;
        lines.push(part);
      }
      if (lines.length >= stopAfter) {
        stdout.destroy();
        return;
      }
      if (slow) {
        stdout.pause();
        setImmediate(() => stdout.resume());
      }
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((res) => {
    child.once('close', (code, signal) => res({ code, signal, stderr }));
  });
  return { exited, lines };
}

it('dumpThroughAPipeToASlowReaderDeliversEveryLineInBoundedMemory', async () => {
  const count = 200_000;
  pushLines(count, (i) => `item-${i}`);
  // A V8 heap of 24 MiB holds far less than the 200,000 lines a writer that ignores
  // backpressure keeps queued: such a writer runs out of memory, or exits with lines unwritten.
  const r = read(['dump', dir, '--format', 'text'], { slow: true, nodeArgs: ['--max-old-space-size=24'] });
  const { code, stderr } = await r.exited;
  expect(stderr).toBe('');
  expect(code).toBe(0);
  expect(r.lines).toHaveLength(count);
  expect(r.lines[0]).toBe('item-1');
  expect(r.lines[count - 1]).toBe(`item-${count}`);
  expect(unacked().unacked, 'dump consumed nothing').toBe(count);
});

it('popIntoAClosedPipeAcksNothingAndExitsQuietly', async () => {
  pushLines(50, (i) => `item-${i}`);
  // The reader is gone before pq writes a byte: no item reached it, so none may be acked.
  const { code, stderr } = await read(['pop', dir, '--count', '50'], { stopAfter: 0 }).exited;
  expect(stderr).toBe('');
  expect(code).toBe(0);
  expect(unacked()).toMatchObject({ unacked: 50, firstSeq: 1 });
});

it('popThroughAReaderThatStopsEarlyLeavesWhatItDidNotWriteInTheStore', async () => {
  const count = 4_000;
  // 1 KiB items, 4 MiB in all: far more than a pipe buffers, so pq is still writing when the
  // reader leaves after three lines.
  const filler = 'x'.repeat(1024);
  pushLines(count, (i) => `${i} ${filler}`);
  const r = read(['pop', dir, '--count', String(count), '--format', 'text'], { stopAfter: 3 });
  const { code, stderr } = await r.exited;
  expect(stderr, 'no EPIPE stack trace').toBe('');
  expect(code).toBe(0);
  expect(r.lines.map((l) => l.split(' ')[0])).toEqual(['1', '2', '3']);
  const after = unacked();
  // What is left is every item from some seq on: acks covered a prefix of what was written.
  expect(after.unacked).toBeGreaterThan(0);
  expect(after.unacked).toBeLessThan(count);
  expect(after.firstSeq! + after.unacked - 1).toBe(count);
  expect(after.nextSeq).toBe(count + 1);
  // The three lines read were handed over, and acked.
  expect(after.firstSeq).toBeGreaterThan(3);
  const left = pq(['dump', dir, '--format', 'text']).stdout.trim().split('\n');
  expect(left).toHaveLength(after.unacked);
  expect(left[0]!.split(' ')[0]).toBe(String(after.firstSeq));
});

it('statsAndDumpIntoAClosedPipeExitQuietly', async () => {
  pushLines(2_000, (i) => `item-${i}`);
  for (const args of [
    ['stats', dir],
    ['stats', dir, '--json'],
    ['dump', dir],
    ['verify', dir],
    ['push', dir, 'x'],
  ]) {
    const { code, stderr } = await read(args, { stopAfter: 0 }).exited;
    expect(stderr, args.join(' ')).toBe('');
    expect(code, args.join(' ')).toBe(0);
  }
  // `pq dump q | head`: the reader takes ten lines of many and leaves.
  const head = read(['dump', dir, '--format', 'text'], { stopAfter: 10 });
  const { code, stderr } = await head.exited;
  expect(stderr).toBe('');
  expect(code).toBe(0);
  expect(head.lines).toEqual(Array.from({ length: 10 }, (_, i) => `item-${i + 1}`));
  takeSpoolIn(dir);
  expect(unacked().unacked).toBe(2_001);
});

it.skipIf(!existsSync('/dev/full'))('anOutputThatCannotBeWrittenIsOneErrorAndExitOne', () => {
  pushLines(20_000, (i) => `item-${i}`);
  for (const args of [
    ['dump', dir],
    ['dump', dir, '--json'],
    ['stats', dir],
  ]) {
    // /dev/full fails every write with ENOSPC, as a full disk does.
    const fd = openSync('/dev/full', 'w');
    try {
      const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', stdio: ['ignore', fd, 'pipe'] });
      expect(r.status, args.join(' ')).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines, args.join(' ')).toHaveLength(1);
      if (args.includes('--json'))
        expect(JSON.parse(lines[0]!)).toMatchObject({ code: 'ERR_OUTPUT', message: expect.stringContaining('ENOSPC') });
      else expect(lines[0]).toMatch(/^pq: cannot write the output: ENOSPC/);
    } finally {
      closeSync(fd);
    }
  }
});
