/**
 * `pq` beside the process that has the queue open: a worker daemon (`process()` running) in a
 * child process holds the store's lock, and `pq push`, `stats`, `dlq list|redrive|purge` and
 * `compact` act on its queue through its endpoint while `pq pop` is refused; with no process
 * serving the queue, `pq push` spools and the next owner takes the items in. The built binary in
 * spawned processes, real processes beside it.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Lines, distUrl, runModule } from '../support/child-process.js';
import { bin, closeQueue, pq, pushStored, serveQueue } from '../support/pq-cli.js';

let work: string;
let dir: string;
const children: Lines[] = [];
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-owner-'));
  dir = join(work, 'queue');
});
afterEach(async () => {
  for (const child of children.splice(0)) await child.kill();
  rmSync(work, { recursive: true, force: true });
});

/**
 * A worker daemon: `process()` over the queue in argv[2], four items at a time, with leases. Its handler acks an item
 * and prints `did <payload>`; dead-letters one whose payload starts with `bad` and prints
 * `dead <payload>`; holds `hold` in flight, printing `holding`, until a `release` line on stdin.
 * A `stop` line closes the queue; it prints `closed` and exits.
 */
const WORKER = `
import { createInterface } from 'node:readline';
import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
const [, rx] = await new Builder(await LogStore.open(process.argv[2])).leaseMs(600_000).open();
let release;
const released = new Promise((resolve) => (release = resolve));
const done = rx.process(async (item) => {
  const text = new TextDecoder().decode(item.bytes);
  if (text.startsWith('bad')) {
    await item.deadLetter('bad input');
    console.log('dead ' + text);
    return;
  }
  if (text === 'hold') {
    console.log('holding');
    await released;
  }
  await item.ack();
  console.log('did ' + text);
}, { concurrency: 4 });
createInterface({ input: process.stdin }).on('line', async (line) => {
  if (line === 'release') release();
  if (line === 'stop') {
    await rx.close();
    await done;
    console.log('closed');
    process.exit(0);
  }
});
console.log('ready');
`;

function startWorker(): Lines {
  const worker = runModule(work, `worker-${children.length}.mjs`, WORKER, [dir]);
  children.push(worker);
  return worker;
}

const count = (lines: string[], line: string): number => lines.filter((l) => l === line).length;

async function stopWorker(worker: Lines): Promise<void> {
  worker.child.stdin!.write('stop\n');
  await worker.until((lines) => lines.includes('closed'));
  if (worker.child.exitCode === null) await new Promise((done) => worker.child.once('exit', done));
}

/** pq run in the background; resolves with its exit status and output. */
function pqLater(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [bin, ...args], { env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

describe('pq beside a worker daemon', () => {
  it('pushStatsDlqAndCompactActThroughTheWorkerWhilePopIsRefused', async () => {
    const worker = startWorker();
    await worker.until((l) => l.includes('ready'));
    const pid = worker.child.pid!;

    // push: through the endpoint, each item answered with its seq, in order.
    expect(pq(['push', dir, 'job-1', 'bad-1', 'bad-2', 'hold'])).toEqual({ code: 0, stdout: '1\n2\n3\n4\n', stderr: '' });
    await worker.until((l) => l.includes('did job-1') && l.includes('dead bad-1') && l.includes('dead bad-2') && l.includes('holding'));

    // stats: the worker's own figures, live.
    const live = JSON.parse(pq(['stats', dir, '--json']).stdout) as Record<string, unknown> & { queue: Record<string, unknown> };
    expect(live).toMatchObject({
      view: 'live',
      pid,
      consuming: true,
      unacked: 1,
      ready: 0,
      inFlight: 1,
      leased: 1,
      deadLetters: 2,
      nextSeq: 5,
    });
    expect(live.queue).toMatchObject({ pushed: 4, acked: 1, deadLettered: 2 });
    const text = pq(['stats', dir]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^live view +the figures of process ${pid}, which has the queue open`, 'm'));
    expect(text.stdout).toMatch(/^in flight +1, 1 of them leased$/m);
    expect(text.stdout).toMatch(/^consumer +taking items$/m);
    // --rates: the counters asked twice; the rates are the differences over the time between.
    const rated = JSON.parse(pq(['stats', dir, '--json', '--rates', '50']).stdout) as { rates: Record<string, number> };
    expect(rated.rates.intervalMs).toBeGreaterThanOrEqual(50);
    for (const [counter, rate] of [
      ['pushed', 'pushesPerSecond'],
      ['acked', 'acksPerSecond'],
      ['nacked', 'nacksPerSecond'],
    ] as const) {
      expect(rated.rates[rate], rate).toBeCloseTo((rated.rates[counter]! * 1000) / rated.rates.intervalMs!, 1);
    }
    expect(pq(['stats', dir, '--rates', '20']).stdout).toMatch(/^rates +[\d.]+ pushes\/s, [\d.]+ acks\/s, [\d.]+ nacks\/s/m);

    // dlq list: the dead letters the worker holds.
    const listed = pq(['dlq', 'list', dir, '--json'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; reason: string; text: string });
    expect(listed.map((d) => [d.seq, d.reason, d.text])).toEqual([
      [2, 'bad input', 'bad-1'],
      [3, 'bad input', 'bad-2'],
    ]);

    // dlq redrive: the worker puts seq 2 back as seq 5, and its handler dead-letters it again.
    expect(JSON.parse(pq(['dlq', 'redrive', dir, '--seq', '2', '--seq', '9', '--json']).stdout)).toEqual({
      count: 1,
      seqs: [5],
      from: [2],
      skipped: [9],
      via: 'endpoint',
      pid,
    });
    await worker.until((l) => count(l, 'dead bad-1') === 2);

    // dlq purge: seq 3 goes for good.
    expect(pq(['dlq', 'purge', dir, '--seq', '3'])).toEqual({
      code: 0,
      stdout: `purged 1 dead letter(s): seq 3 (through process ${pid}, which has the queue open)\n`,
      stderr: '',
    });
    expect(
      pq(['dlq', 'list', dir, '--json'])
        .stdout.trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { seq: number }).seq),
    ).toEqual([5]);

    // compact: the worker compacts its own store.
    const compacted = JSON.parse(pq(['compact', dir, '--json']).stdout) as Record<string, unknown>;
    expect(compacted).toMatchObject({
      via: 'endpoint',
      pid,
      bytesReclaimed: expect.any(Number),
      bytesOnDiskBefore: expect.any(Number),
      bytesOnDiskAfter: expect.any(Number),
    });

    // pop: refused, naming the worker, with its own code and exit status; nothing changed.
    const refused = pq(['pop', dir]);
    expect(refused).toMatchObject({ code: 3, stdout: '' });
    expect(refused.stderr).toMatch(
      new RegExp(
        `^pq: ERR_CONSUMED: The queue in .* is consumed by process ${pid}: pq pop would compete with its consumer for the items, .*\\n$`,
      ),
    );
    const json = pq(['pop', dir, '--json', '--no-ack']);
    expect(json.code).toBe(3);
    expect(JSON.parse(json.stderr)).toMatchObject({ code: 'ERR_CONSUMED', pid });
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ view: 'live', unacked: 1, inFlight: 1, deadLetters: 1 });

    // Once the worker is gone, what it did is in the store.
    worker.child.stdin!.write('release\n');
    await worker.until((l) => l.includes('did hold'));
    await stopWorker(worker);
    const after = JSON.parse(pq(['stats', dir, '--json']).stdout) as Record<string, unknown>;
    expect(after).toMatchObject({ view: 'read-only', unacked: 0, deadLetters: 1, nextSeq: 6, liveWriter: null, lastShutdownClean: true });
  }, 60_000);

  it('pushWithNoOwnerSpoolsAndAWorkerStartedLaterTakesTheItemsIn', async () => {
    expect(pq(['push', dir, '--create', 'a', 'b', 'c'])).toEqual({
      code: 0,
      stdout: 'spooled 3 item(s): no process serves the queue now; the one that takes them in gives them seqs\n',
      stderr: '',
    });
    expect(JSON.parse(pq(['push', dir, '--priority', '5', 'urgent', '--json']).stdout)).toEqual({ count: 1, seqs: null, via: 'spool' });
    // Nobody has the queue open: the files are read, and the spooled pushes counted.
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({
      view: 'read-only',
      unacked: 0,
      spool: { files: 2, pendingRecords: 4 },
    });
    expect(pq(['stats', dir]).stdout).toMatch(/^spool +4 spooled push\(es\) in 2 file\(s\), ingested at the first open$/m);

    const worker = startWorker();
    await worker.until((l) => ['a', 'b', 'c', 'urgent'].every((t) => l.includes(`did ${t}`)));
    const done = worker.lines.filter((l) => l.startsWith('did ')).map((l) => l.slice(4));
    // One run's items keep their order.
    expect(done.filter((t) => t !== 'urgent')).toEqual(['a', 'b', 'c']);
    const live = JSON.parse(pq(['stats', dir, '--json']).stdout) as { view: string; spool: { ingested: number }; queue: { acked: number } };
    expect(live).toMatchObject({ view: 'live', pid: worker.child.pid, unacked: 0, spool: { ingested: 4 }, queue: { acked: 4 } });
    // With an owner serving, a push is answered with its seq: after the four taken in.
    expect(pq(['push', dir, 'd'])).toMatchObject({ code: 0, stdout: '5\n' });
    await worker.until((l) => l.includes('did d'));
    await stopWorker(worker);
  }, 60_000);

  it('aWorkerKilledLeavesItsSocketAndPqSpoolsAndPopsPastIt', async () => {
    const worker = startWorker();
    await worker.until((l) => l.includes('ready'));
    expect(pq(['push', dir, 'hold'])).toMatchObject({ code: 0, stdout: '1\n' });
    await worker.until((l) => l.includes('holding'));
    await worker.kill();
    // The socket file is left behind; nothing listens on it.
    expect(readdirSync(dir)).toContain('pq.sock');
    expect(pq(['push', dir, 'after'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
    expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({
      view: 'read-only',
      unacked: 1,
      spool: { files: 1, pendingRecords: 1 },
    });
    // pop takes the lock the killed worker held, and takes the spooled push in.
    const popped = pq(['pop', dir, '--count', '5', '--format', 'text']);
    expect(popped).toMatchObject({ code: 0, stdout: 'hold\nafter\n' });
  }, 60_000);
});

describe('pq pop beside an owner that consumes nothing', () => {
  it('popIsErrLockedSayingWhyAndWaitsForTheOwnerToClose', async () => {
    const owner = await serveQueue(work, dir);
    try {
      expect(pq(['push', dir, 'x'])).toMatchObject({ code: 0, stdout: '1\n' });
      const refused = pq(['pop', dir]);
      expect(refused).toMatchObject({ code: 1, stdout: '' });
      expect(refused.stderr).toMatch(
        new RegExp(
          `^pq: ERR_LOCKED: Process ${owner.child.pid} has the queue in .* open \\(no consumer of it is taking items now\\), and pq pop cannot take items through it`,
        ),
      );
      expect(JSON.parse(pq(['pop', dir, '--json']).stderr)).toMatchObject({ code: 'ERR_LOCKED', pid: owner.child.pid });
      // With --wait, pop takes the lock once the owner lets go of it.
      const waiting = pqLater(['pop', dir, '--wait', '60000', '--format', 'text']);
      expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ view: 'live', consuming: false, ready: 1 });
      await closeQueue(owner);
      expect(await waiting).toMatchObject({ code: 0, stdout: 'x\n' });
    } finally {
      await owner.kill();
    }
  }, 60_000);
});

describe('hostile surroundings stay typed errors', () => {
  it('badLiveOptionsAreUsageErrors', () => {
    pushStored(dir, ['--create', 'x']);
    for (const [args, message] of [
      [['--rates', '0'], "--rates must be an integer >= 1, got '0'"],
      [['--rates', 'soon'], "--rates must be an integer >= 1, got 'soon'"],
      [
        ['--rates', '5', '--read-only'],
        '--rates measures the live figures of the process that has the queue open, which --read-only does not ask for',
      ],
      [['--read-only=yes'], "option --read-only takes no value, got 'yes'"],
    ] as const) {
      expect(pq(['stats', dir, ...args])).toEqual({ code: 2, stdout: '', stderr: `pq: ${message} (see pq stats --help)\n` });
    }
    // With no process serving the queue, --rates has nothing to measure: said, not refused.
    const r = JSON.parse(pq(['stats', dir, '--rates', '5', '--json']).stdout) as Record<string, unknown>;
    expect(r).toMatchObject({ view: 'read-only', rates: null, unacked: 1 });
  });

  it('aSocketThatAnswersGarbageIsNoOwnerAndNothingIsLost', async () => {
    pushStored(dir, ['--create', 'x']);
    // Something that is not an owner listens on pq.sock and answers every connection with junk.
    const connections = new Set<Socket>();
    const junk: Server = createServer((socket) => {
      connections.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => connections.delete(socket));
      socket.end(Buffer.alloc(64, 0xff));
    });
    await new Promise<void>((resolve) => junk.listen(join(dir, 'pq.sock'), resolve));
    try {
      const pushed = await pqLater(['push', dir, 'y']);
      expect(pushed).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 1 item/) });
      const stats = JSON.parse((await pqLater(['stats', dir, '--json'])).stdout) as Record<string, unknown>;
      expect(stats).toMatchObject({ view: 'read-only', unacked: 1, spool: { files: 1, pendingRecords: 1 } });
      expect(await pqLater(['dlq', 'list', dir])).toEqual({ code: 0, stdout: '', stderr: '' });
      const popped = await pqLater(['pop', dir, '--count', '5', '--format', 'text']);
      expect(popped).toMatchObject({ code: 0, stdout: 'x\ny\n' });
    } finally {
      for (const socket of connections) socket.destroy();
      await new Promise((resolve) => junk.close(resolve));
    }
  });
});
