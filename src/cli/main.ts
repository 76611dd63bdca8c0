/**
 * `pq`: look inside a persistent-queue store, use it from a shell, and watch it survive a crash.
 * Exit status: 0 success, 1 failure (corruption, a held store, ...), 2 bad usage.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Builder, LogStore, QueueError, type Durability } from '../index.js';
import { verifyStore, type VerifyProblem } from '../index.js';

const USAGE = `Usage: pq <command> [options]

Commands:
  demo [dir] [--seconds N] [--keep]      watch a producer get SIGKILLed and lose nothing
  stats <dir> [--json]                   items, seq range, segments, cursor, format version
  verify <dir> [--json]                  full CRC scan of every file; never changes a byte
  dump <dir> [--from SEQ] [--limit N] [--format jsonl|text|hex]
                                         print unacked items without consuming them
  push <dir> [DATA...] [--durability sync|group|none]
                                         push each DATA (or each stdin line)
  pop <dir> [--count N] [--no-ack] [--format jsonl|text|hex]
                                         take items (ack them unless --no-ack)
  compact <dir>                          run a compaction pass, report bytes reclaimed

Exit status: 0 success, 1 failure, 2 usage error. Colours only on a terminal; NO_COLOR honoured.`;

class UsageError extends Error {}

const useColor = process.stdout.isTTY === true && !('NO_COLOR' in process.env && process.env.NO_COLOR !== '');
const paint = (code: number) => (text: string) => (useColor ? `\x1b[${code}m${text}\x1b[0m` : text);
const green = paint(32);
const red = paint(31);
const bold = paint(1);
const dim = paint(2);

function out(line = ''): void {
  process.stdout.write(line + '\n');
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

function bytesText(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function intOption(name: string, value: string | undefined, fallback: number, min = 0): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be an integer >= ${min}, got '${value}'`);
  return n;
}

function oneDir(positionals: string[], command: string): string {
  if (positionals.length !== 1) throw new UsageError(`pq ${command} takes exactly one <dir>`);
  return positionals[0]!;
}

/** A store that exists: the read-only commands never create one. */
function existingDir(dir: string): string {
  if (!existsSync(dir)) throw new QueueError('ERR_STORE', `${dir}: no such store`);
  return dir;
}

type Format = 'jsonl' | 'text' | 'hex';
function formatOption(value: string | undefined, fallback: Format): Format {
  const f = value ?? fallback;
  if (f !== 'jsonl' && f !== 'text' && f !== 'hex') throw new UsageError(`--format must be jsonl, text or hex, got '${f}'`);
  return f;
}

function showItem(format: Format, seq: number, bytes: Uint8Array, deliveries?: number): string {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (format === 'text') return buf.toString('utf8');
  if (format === 'hex') return `${seq}\t${buf.toString('hex')}`;
  const text = buf.toString('utf8');
  const utf8 = Buffer.from(text, 'utf8').equals(buf);
  return JSON.stringify({
    seq,
    bytes: buf.length,
    ...(deliveries !== undefined ? { deliveries } : {}),
    ...(utf8 ? { text } : { base64: buf.toString('base64') }),
  });
}

// ------------------------------------------------------------------------------------ commands

async function stats(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, options: { json: { type: 'boolean' } }, allowPositionals: true });
  const dir = existingDir(oneDir(positionals, 'stats'));
  const store = await LogStore.open(dir);
  try {
    const s = store.inspect();
    const lastShutdownClean = s.recovery.cleanShutdown;
    const firstSeq = s.count > 0 ? s.lowWaterMark : null;
    const report = {
      dir: s.dir,
      formatVersion: s.formatVersion,
      ready: s.count,
      firstSeq,
      nextSeq: s.nextSeq,
      lowWaterMark: s.lowWaterMark,
      ackedRangesAboveLowWaterMark: s.ackedRanges,
      segments: s.segments.length,
      segmentBytes: s.segments.reduce((a, x) => a + x.bytes, 0),
      cursorBytes: s.cursorBytes,
      bytesOnDisk: s.bytesOnDisk,
      lastShutdownClean,
      tornBytesCut: s.recovery.tornBytes,
      zeroTailBytesCut: s.recovery.zeroTailBytes,
    };
    if (values.json) {
      out(JSON.stringify({ ...report, segmentFiles: s.segments }, null, 2));
      return 0;
    }
    out(`${bold('store')}           ${report.dir}`);
    out(`format version  ${report.formatVersion}`);
    out(`items ready     ${fmt(report.ready)}`);
    out(`seq range       ${firstSeq === null ? '(empty)' : `${firstSeq} .. ${report.nextSeq - 1}`}   next seq ${report.nextSeq}`);
    out(`cursor          low-water mark ${report.lowWaterMark}, ${report.ackedRangesAboveLowWaterMark} acked range(s) above it, ${bytesText(report.cursorBytes)}`);
    out(`segments        ${report.segments} (${bytesText(report.segmentBytes)})`);
    for (const seg of s.segments) {
      out(dim(`  ${seg.file}  ${bytesText(seg.bytes)}${seg.sealed ? ' sealed' : ' active'}${seg.compacted ? ' compacted' : ''}`));
    }
    out(`on disk         ${bytesText(report.bytesOnDisk)}`);
    out(`last shutdown   ${lastShutdownClean ? green('clean') : red('not clean (recovered)')}${report.tornBytesCut > 0 ? `, ${report.tornBytesCut} torn bytes cut` : ''}`);
    return 0;
  } finally {
    await store.close();
  }
}

async function verify(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, options: { json: { type: 'boolean' } }, allowPositionals: true });
  const dir = existingDir(oneDir(positionals, 'verify'));
  const showProgress = process.stderr.isTTY === true && !values.json;
  const result = verifyStore(resolve(dir), {
    onProgress: showProgress
      ? (done, total) => {
          const width = 30;
          const filled = total === 0 ? width : Math.round((done / total) * width);
          process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${bytesText(done)} / ${bytesText(total)}`);
        }
      : undefined,
  });
  if (showProgress) process.stderr.write('\n');
  if (values.json) {
    out(JSON.stringify(result, null, 2));
  } else {
    out(`checked ${result.files} file(s), ${fmt(result.records)} record(s), ${bytesText(result.bytes)}`);
    for (const p of result.problems) out(red(p.reason.includes(p.file) ? p.reason : `${p.file} at offset ${p.offset}: ${p.reason}`));
    for (const n of result.notes) out(dim(n));
    out(result.problems.length === 0 ? green('sound') : red(`${result.problems.length} problem(s)`));
  }
  return result.problems.length === 0 ? 0 : 1;
}

async function dump(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { from: { type: 'string' }, limit: { type: 'string' }, format: { type: 'string' } },
    allowPositionals: true,
  });
  const from = intOption('from', values.from, 0);
  const limit = intOption('limit', values.limit, Number.MAX_SAFE_INTEGER, 1);
  const format = formatOption(values.format, 'jsonl');
  const dir = existingDir(oneDir(positionals, 'dump'));
  const store = await LogStore.open(dir);
  try {
    const { nextSeq } = await store.open();
    let after = Math.max(0, from - 1);
    let printed = 0;
    while (printed < limit) {
      const page = store.read({ after, before: nextSeq, limit: Math.min(256, limit - printed) });
      if (page.length === 0) break;
      for (const item of page) out(showItem(format, item.seq, item.bytes));
      printed += page.length;
      after = page[page.length - 1]!.seq;
    }
    return 0;
  } finally {
    await store.close();
  }
}

async function readStdinLines(): Promise<string[]> {
  const lines: string[] = [];
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) lines.push(line);
  return lines;
}

function durabilityOption(value: string | undefined): Durability {
  const d = value ?? 'group';
  if (d !== 'sync' && d !== 'group' && d !== 'none') throw new UsageError(`--durability must be sync, group or none, got '${d}'`);
  return d;
}

async function push(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, options: { durability: { type: 'string' } }, allowPositionals: true });
  if (positionals.length < 1) throw new UsageError('pq push needs a <dir>');
  const [dir, ...data] = positionals as [string, ...string[]];
  const durability = durabilityOption(values.durability);
  const payloads = data.length > 0 ? data : await readStdinLines();
  const [tx] = await new Builder(await LogStore.open(dir)).durability(durability).open();
  try {
    const seqs = await tx.pushMany(payloads);
    for (const seq of seqs) out(String(seq));
    return 0;
  } finally {
    await tx.close();
  }
}

async function pop(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { count: { type: 'string' }, 'no-ack': { type: 'boolean' }, format: { type: 'string' } },
    allowPositionals: true,
  });
  const count = intOption('count', values.count, 1, 1);
  const format = formatOption(values.format, 'text');
  const dir = existingDir(oneDir(positionals, 'pop'));
  const [tx, rx] = await new Builder(await LogStore.open(dir)).durability('sync').open();
  try {
    for (let i = 0; i < count; i++) {
      const item = rx.tryReserve();
      if (!item) break;
      out(showItem(format, item.seq, item.bytes, item.deliveries));
      if (!values['no-ack']) await item.ack();
    }
    return 0;
  } finally {
    await tx.close(); // unacked (--no-ack) items return to the store
  }
}

async function compact(args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, options: {}, allowPositionals: true });
  const dir = existingDir(oneDir(positionals, 'compact'));
  const store = await LogStore.open(dir);
  try {
    const before = store.inspect().bytesOnDisk;
    const r = await store.compact();
    const after = store.inspect().bytesOnDisk;
    out(
      `reclaimed ${bytesText(r.bytesReclaimed)}: ${r.segmentsDeleted} segment(s) deleted, ${r.segmentsRewritten} rewritten; ${bytesText(before)} -> ${bytesText(after)} on disk`,
    );
    return 0;
  } finally {
    await store.close();
  }
}

// ---------------------------------------------------------------------------------------- demo

const DEMO_PRODUCERS = 64;
const DEMO_PAYLOAD_BYTES = 128;

/** The payload of producer `p`'s `n`th push: its identity, then filler derived from it, so damage shows. */
function demoPayload(p: number, n: number): Uint8Array {
  const bytes = new Uint8Array(DEMO_PAYLOAD_BYTES);
  const head = Buffer.from(`${p}:${n}:`);
  bytes.set(head);
  let x = (p * 2654435761 + n * 40503) >>> 0;
  for (let i = head.length; i < bytes.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

function demoPayloadIntact(bytes: Uint8Array): boolean {
  const m = /^(\d+):(\d+):/.exec(Buffer.from(bytes.subarray(0, 24)).toString('latin1'));
  if (!m) return false;
  return Buffer.from(demoPayload(Number(m[1]), Number(m[2]))).equals(Buffer.from(bytes));
}

/** The child of `pq demo`: 64 producers pushing under `group`, one consumer acking, reports on stdout. */
async function demoChild(args: string[]): Promise<number> {
  const dir = args[0]!;
  const [tx, rx] = await new Builder(await LogStore.open(dir)).durability('group').open();
  let pushedThrough = 0;
  let ackedThrough = 0;
  let pushes = 0;
  let acks = 0;
  const report = () => out(JSON.stringify({ pushedThrough, ackedThrough, pushes, acks }));
  setInterval(report, 50);
  const producer = async (p: number) => {
    for (let n = 0; ; n++) {
      const seq = await tx.push(demoPayload(p, n));
      // Batches are stored in seq order, so the highest resolved seq has every lower one resolved.
      if (seq > pushedThrough) pushedThrough = seq;
      pushes++;
    }
  };
  for (let p = 0; p < DEMO_PRODUCERS; p++) void producer(p);
  // The consumer issues acks in seq order without waiting for each: they are made durable in
  // group commits, in order, so the acks on disk are always a prefix of the delivered seqs.
  for await (const item of rx) {
    const seq = item.seq;
    void item.ack().then(() => {
      ackedThrough = seq;
      acks++;
    });
  }
  return 0;
}

interface ChildReport {
  pushedThrough: number;
  ackedThrough: number;
  pushes: number;
  acks: number;
}

async function demo(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { seconds: { type: 'string' }, keep: { type: 'boolean' } },
    allowPositionals: true,
  });
  if (positionals.length > 1) throw new UsageError('pq demo takes at most one [dir]');
  const seconds = intOption('seconds', values.seconds, 4, 1);
  const made = positionals.length === 0;
  const dir = made ? mkdtempSync(join(tmpdir(), 'pq-demo-')) : resolve(positionals[0]!);
  try {
    out(bold('persistent-queue demo: a producer is SIGKILLed mid-stream; nothing it was told is stored may be lost'));
    out(dim(`store: ${dir}`));
    out(`1. start a child process: ${DEMO_PRODUCERS} producers pushing ${DEMO_PAYLOAD_BYTES} B items under 'group', one consumer acking`);
    const cli = fileURLToPath(new URL('./pq.js', import.meta.url));
    const child = spawn(process.execPath, [cli, '__demo-child', dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    let last: ChildReport = { pushedThrough: 0, ackedThrough: 0, pushes: 0, acks: 0 };
    let previous = last;
    let previousAt = performance.now();
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      try {
        last = JSON.parse(line) as ChildReport;
      } catch {
        // A line torn by the kill: the previous report stands.
      }
    });
    const exited = new Promise<void>((res) => child.once('exit', () => res()));
    // Kill at a moment that is not a round number of seconds into the run.
    const killAtMs = seconds * 1000 * 0.6 + ((process.pid * 7919) % Math.max(1, seconds * 300));
    const startedAt = performance.now();
    await new Promise<void>((resolveKill) => {
      const timer = setInterval(() => {
        const now = performance.now();
        const rate = ((last.pushes - previous.pushes) / (now - previousAt)) * 1000;
        const ackRate = ((last.acks - previous.acks) / (now - previousAt)) * 1000;
        previous = last;
        previousAt = now;
        const line = `   pushed ${fmt(last.pushes)} (${fmt(rate)}/s), acked ${fmt(last.acks)} (${fmt(ackRate)}/s)`;
        if (process.stdout.isTTY) process.stdout.write(`\r${line}   `);
        else out(line);
        if (now - startedAt >= killAtMs) {
          clearInterval(timer);
          resolveKill();
        }
      }, 500);
    });
    const reported = last;
    child.kill('SIGKILL');
    await exited;
    lines.close();
    if (process.stdout.isTTY) out();
    out(`2. ${red('SIGKILL')} after ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
    out(`   the child last reported: every push through seq ${reported.pushedThrough} resolved, every ack through seq ${reported.ackedThrough} resolved`);

    out('3. reopen the store in this process and read everything back');
    const openedAt = performance.now();
    const store = await LogStore.open(dir);
    const openMs = performance.now() - openedAt;
    const info = store.recovery;
    out(
      `   opened in ${openMs.toFixed(1)} ms; last shutdown ${info.cleanShutdown ? 'clean' : 'not clean'}; tail: ${info.tornBytes} torn byte(s) cut and kept aside, ${bytesText(info.zeroTailBytes)} of preallocated zeros trimmed`,
    );
    const [tx, rx] = await new Builder(store).durability('group').open();
    const ready = rx.stats().ready;
    let first = 0;
    let lastSeq = 0;
    let delivered = 0;
    let damaged = 0;
    let outOfOrder = 0;
    const present = new Set<number>();
    for (let item = rx.tryReserve(); item; item = rx.tryReserve()) {
      if (first === 0) first = item.seq;
      if (item.seq <= lastSeq) outOfOrder++;
      lastSeq = item.seq;
      if (!demoPayloadIntact(item.bytes)) damaged++;
      present.add(item.seq);
      delivered++;
      await item.ack();
    }
    await tx.close();
    // Every seq the child was told is stored, and had not acked, must be here. The consumer acks
    // in seq order, so the seqs below the first one delivered were acked (and stayed acked).
    const firstLive = first === 0 ? reported.pushedThrough + 1 : first;
    let lost = 0;
    for (let seq = Math.max(firstLive, 1); seq <= reported.pushedThrough; seq++) if (!present.has(seq)) lost++;
    const ackRegressed = first !== 0 && first <= reported.ackedThrough ? 1 : 0;
    out(`   ${fmt(ready)} item(s) were waiting: seq ${first || '-'} .. ${lastSeq || '-'}`);
    out('');
    out(bold('result'));
    out(`   pushes the child saw resolve    ${fmt(reported.pushedThrough)} (seq 1 .. ${reported.pushedThrough})`);
    out(`   consumed and acked before kill  ${fmt(firstLive - 1)}`);
    out(`   recovered and delivered now     ${fmt(delivered)} (${fmt(Math.max(0, lastSeq - reported.pushedThrough))} more were stored after the last report)`);
    out(`   damaged payloads                ${damaged}`);
    out(`   out of order                    ${outOfOrder}`);
    out(`   acked items delivered again     ${ackRegressed}`);
    const ok = lost === 0 && damaged === 0 && outOfOrder === 0 && ackRegressed === 0;
    out(`   ${ok ? green('lost: 0') : red(`lost: ${lost}`)}`);
    out(ok ? green('every acknowledged push survived the SIGKILL') : red('FAILED: acknowledged data was lost or damaged'));
    return ok ? 0 : 1;
  } finally {
    if (made && !values.keep) rmSync(dir, { recursive: true, force: true });
    else out(dim(`kept ${dir}`));
  }
}

// ---------------------------------------------------------------------------------------- main

const COMMANDS: Record<string, (args: string[]) => Promise<number>> = {
  demo,
  stats,
  verify,
  dump,
  push,
  pop,
  compact,
  '__demo-child': demoChild,
};

/** One clear line for every failure a user can meet. */
function describeFailure(error: unknown): string {
  if (error instanceof QueueError) {
    const where =
      error.file !== undefined && !error.message.includes(error.file)
        ? ` (${error.file}${error.offset !== undefined ? ` at offset ${error.offset}` : ''})`
        : '';
    const cause = error.cause as { pid?: number } | undefined;
    const pid = error.code === 'ERR_LOCKED' && cause?.pid !== undefined && !error.message.includes(String(cause.pid)) ? ` (held by pid ${cause.pid})` : '';
    return `pq: ${error.code}: ${error.message}${where}${pid}`;
  }
  return `pq: ${error instanceof Error ? error.message : String(error)}`;
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...args] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    out(USAGE);
    return command === undefined ? 2 : 0;
  }
  const run = COMMANDS[command];
  if (!run) {
    process.stderr.write(`pq: unknown command '${command}'\n\n${USAGE}\n`);
    return 2;
  }
  try {
    return await run(args);
  } catch (error) {
    if (error instanceof UsageError || (error as { code?: string })?.code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`pq: ${(error as Error).message}\n\n${USAGE}\n`);
      return 2;
    }
    process.stderr.write(describeFailure(error) + '\n');
    return 1;
  }
}

export type { VerifyProblem };

/** The executable's whole life: run the command line, then exit with its status. */
export async function run(argv: string[]): Promise<void> {
  try {
    const code = await main(argv);
    process.exitCode = code;
    // The demo child runs until killed; everything else ends here.
    if (argv[0] !== '__demo-child') setImmediate(() => process.exit(code));
  } catch (error) {
    process.stderr.write(describeFailure(error) + '\n');
    process.exit(1);
  }
}
