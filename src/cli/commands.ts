/** The store commands of `pq`: stats, verify, dump, push, pop, compact. */
import { readdirSync, statSync, type Stats } from 'node:fs';
import { createInterface } from 'node:readline';
import { basename, resolve } from 'node:path';
import { Builder, LogStore, PRIORITY_MAX, PRIORITY_MIN, QueueError, isQueueError, verifyStore, type Consumer, type Durability, type LogStoreOptions, type PushOptions, type Reserved } from '../index.js';
import { classifyEntry } from '../log/format.js';
import { isValidKey } from '../key-records.js';
import { MAX_KEY_BYTES } from '../store.js';
import { UsageError, type ParsedArgs } from './args.js';
import { Progress, type Output } from './output.js';
import { PAYLOAD_CODECS, bold, bytesText, damageText, dim, fmt, green, progressBar, red, showItem, type Format, type PayloadCodec } from './text.js';

/** What a command writes to, and how. */
export interface Cli {
  readonly out: Output;
  readonly err: Output;
  /** `--json`: the result (and any error) as JSON. */
  readonly json: boolean;
}

export type Command = (cli: Cli, args: ParsedArgs) => Promise<number>;

/**
 * `pop` takes up to this many items, writes them, waits until the lines are handed to the
 * operating system, then acks them together: the acks of a batch share one fsync, where acking
 * item by item paid one fsync each. The first batch holds one item and each next one twice as
 * many, so a reader that stops early (`| head -1`) leaves few lines unread in the pipe's buffer:
 * those count as delivered and are acked.
 */
const POP_BATCH_ITEMS = 256;
/** A batch also ends once its output reaches this size, so large payloads do not make large batches. */
const POP_BATCH_CHARS = 256 * 1024;
/** Items `dump` asks the store for at a time. */
const DUMP_PAGE_ITEMS = 256;

export function intOption(command: string, name: string, value: string | boolean | undefined, fallback: number, min = 0): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (typeof value !== 'string' || value.trim() === '' || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(`--${name} must be an integer >= ${min}, got '${String(value)}'`, command);
  }
  return n;
}

/** `--wait MS`: how long `LogStore.open` waits for a store another process holds. */
export function waitOption(command: string, value: string | boolean | undefined): LogStoreOptions {
  return { lockTimeoutMs: intOption(command, 'wait', value, 0) };
}

function stringOption(value: string | boolean | undefined): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

export function oneDir(command: string, positionals: readonly string[]): string {
  if (positionals.length !== 1) throw new UsageError(`pq ${command} takes exactly one <dir>, got ${positionals.length}`, command);
  return positionals[0]!;
}

/**
 * Refuse a path that is not a store, for `verify`, which reads files without opening the store:
 * the same answers `LogStore.open` gives with `mustExist` (`ERR_NOT_FOUND` for a missing path or
 * a directory without a store in it, `ERR_STORE` for a path that is not a directory).
 */
export function requireStore(dir: string): void {
  let st: Stats | undefined;
  let names: string[];
  try {
    st = statSync(dir, { throwIfNoEntry: false });
    names = st?.isDirectory() ? readdirSync(dir) : [];
  } catch (error) {
    throw new QueueError('ERR_STORE', `Cannot read ${dir}: ${(error as Error).message}`, { cause: error, file: dir });
  }
  if (st === undefined) throw new QueueError('ERR_NOT_FOUND', `No store at ${dir}: no such directory`, { file: dir });
  if (!st.isDirectory()) throw new QueueError('ERR_STORE', `Store path ${dir} exists and is not a directory`, { file: dir });
  const kinds = names.map(classifyEntry);
  if (!kinds.includes('segment') && !kinds.includes('cursor')) {
    throw new QueueError('ERR_NOT_FOUND', `No store at ${dir}: the directory holds no segment or cursor file`, { file: dir });
  }
}

/** Whether `dir` holds a store (the check of {@link requireStore}, answered instead of thrown). */
function isStore(dir: string): boolean {
  try {
    requireStore(dir);
    return true;
  } catch {
    return false;
  }
}

/**
 * `--format` of `dump` and `pop`, with `--json` standing for jsonl. Both print JSON Lines unless
 * told otherwise: one line per item whatever its payload holds (a newline, bytes that are not
 * UTF-8, characters a terminal acts on), with the seq a consumer dedupes on. `text` prints the
 * payloads as they are, for pipes that want only them.
 */
function formatOption(command: string, cli: Cli, value: string | boolean | undefined, fallback: Format): Format {
  const given = stringOption(value);
  if (cli.json) {
    if (given !== undefined && given !== 'jsonl') throw new UsageError(`--json prints JSON Lines; it cannot be combined with --format ${given}`, command);
    return 'jsonl';
  }
  const f = given ?? fallback;
  if (f !== 'jsonl' && f !== 'text' && f !== 'hex') throw new UsageError(`--format must be jsonl, text or hex, got '${f}'`, command);
  return f;
}

/** `--codec`: the codec the queue was written with, which the store does not record. */
export function codecOption(command: string, value: string | boolean | undefined): PayloadCodec {
  const c = stringOption(value) ?? 'bytes';
  if (!(PAYLOAD_CODECS as readonly string[]).includes(c)) {
    throw new UsageError(`--codec must be ${PAYLOAD_CODECS.slice(0, -1).join(', ')} or ${PAYLOAD_CODECS.at(-1)}, got '${c}'`, command);
  }
  return c as PayloadCodec;
}

/** `--priority N`, `--delay MS`, `--not-before TIME` of `pq push`, as push options. */
function scheduleOptions(values: Record<string, string | boolean | undefined>): PushOptions {
  const options: { priority?: number; delayMs?: number; notBefore?: number } = {};
  const priority = values.priority;
  if (priority !== undefined) {
    const n = Number(priority);
    if (typeof priority !== 'string' || priority.trim() === '' || !Number.isInteger(n) || n < PRIORITY_MIN || n > PRIORITY_MAX) {
      throw new UsageError(`--priority must be an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}, got '${String(priority)}'`, 'push');
    }
    options.priority = n;
  }
  if (values.delay !== undefined && values['not-before'] !== undefined) throw new UsageError('--delay and --not-before exclude each other', 'push');
  if (values.delay !== undefined) options.delayMs = intOption('push', 'delay', values.delay, 0);
  const at = values['not-before'];
  if (at !== undefined) {
    const text = typeof at === 'string' ? at.trim() : '';
    const ms = /^\d+$/.test(text) ? Number(text) : Date.parse(text);
    if (!Number.isSafeInteger(ms) || ms < 0) throw new UsageError(`--not-before must be an ISO 8601 time or ms since the epoch, got '${String(at)}'`, 'push');
    options.notBefore = ms;
  }
  return options;
}

function durabilityOption(value: string | boolean | undefined): Durability {
  const d = stringOption(value) ?? 'group';
  if (d !== 'sync' && d !== 'group' && d !== 'none') throw new UsageError(`--durability must be sync, group or none, got '${d}'`, 'push');
  return d;
}

/**
 * The next item, or null once none is ready. `tryReserve` also answers null while the next item
 * waits for its delivery mark to be stored (an item handed out before: by a `pop --no-ack`, or by
 * a process that was killed); `ready` still counts such an item, so then this waits for it
 * instead of stopping as if the queue were empty.
 */
export async function reserveReady(rx: Consumer): Promise<Reserved | null> {
  return rx.tryReserve() ?? (rx.stats().ready > 0 ? rx.reserve() : null);
}

/** Write a line, waiting first when the output is backed up. */
export async function emit(out: Output, line: string): Promise<void> {
  if (!out.line(line)) await out.ready();
}

// ---------------------------------------------------------------------------------------------

export const stats: Command = async (cli, { positionals }) => {
  const dir = oneDir('stats', positionals);
  // Read-only: no lock, no write, so a store another process has open can be inspected too.
  const store = await LogStore.open(dir, { readOnly: true });
  try {
    const s = store.inspect();
    // A store another process has open has not been shut down: the question does not apply yet.
    const lastShutdownClean = s.liveWriter !== null ? null : s.recovery.cleanShutdown;
    const firstSeq = s.count > 0 ? s.lowWaterMark : null;
    const scheduled = scheduledCounts(store, s.scheduledFrom, s.nextSeq, Date.now());
    const report = {
      dir: s.dir,
      storeId: s.storeId,
      formatVersion: s.formatVersion,
      // Every item not yet acked: ready ones, delayed ones and, in a process that has the queue
      // open, those in flight. How many are in flight only that process knows (see `leased`).
      unacked: s.count,
      firstSeq,
      nextSeq: s.nextSeq,
      lowWaterMark: s.lowWaterMark,
      ackedRangesAboveLowWaterMark: s.ackedRanges,
      segments: s.segments.length,
      segmentBytes: s.segments.reduce((a, x) => a + x.bytes, 0),
      cursorBytes: s.cursorBytes,
      deadLetters: s.deadLetters,
      deadLetterBytes: s.deadLetterBytes,
      // Pushes spooled by producers while no process had the queue open, not ingested yet (as of
      // the cursor's checkpoint): the next owner ingests them at open.
      spool: { files: s.spool?.files ?? 0, pendingRecords: s.spool?.pendingRecords ?? 0 },
      // Items not yet due, and items with a priority, as of now (read from the oldest one on).
      delayed: scheduled.delayed,
      nextDueAt: scheduled.nextDueMs === Infinity ? null : new Date(scheduled.nextDueMs).toISOString(),
      prioritized: scheduled.prioritized,
      // Leases are held by the process that has the queue open, in memory: no store records them.
      leased: null,
      bytesOnDisk: s.bytesOnDisk,
      // The process that had the store open as it was read: its tail is a write in progress, so
      // the items shown end at its last whole record and no byte is called torn.
      liveWriter: s.liveWriter,
      lastShutdownClean,
      // Read-only: nothing is cut. These are the bytes past the valid end of the active segment
      // of a store nobody has open, which the next writable open cuts (0 beside a live writer).
      tornTailBytes: s.recovery.tornBytes,
      zeroTailBytes: s.recovery.zeroTailBytes,
    };
    const out = cli.out;
    if (cli.json) {
      out.line(JSON.stringify({ ...report, segmentFiles: s.segments }, null, 2));
      return 0;
    }
    out.line(`${bold('store')}           ${report.dir}`);
    out.line(`format version  ${report.formatVersion}`);
    out.line(`unacked         ${fmt(report.unacked)}`);
    out.line(`delayed         ${report.delayed === 0 ? '0' : `${fmt(report.delayed)} not yet due, the next at ${report.nextDueAt}`}`);
    if (report.prioritized > 0) out.line(`prioritized     ${fmt(report.prioritized)}`);
    out.line(`leased          ${dim('not known here: leases live in the process that has the queue open')}`);
    out.line(`seq range       ${firstSeq === null ? '(empty)' : `${firstSeq} .. ${report.nextSeq - 1}`}   next seq ${report.nextSeq}`);
    out.line(`cursor          low-water mark ${report.lowWaterMark}, ${report.ackedRangesAboveLowWaterMark} acked range(s) above it, ${bytesText(report.cursorBytes)}`);
    if (report.deadLetters > 0) out.line(`dead letters    ${fmt(report.deadLetters)} (${bytesText(report.deadLetterBytes)}, held in the cursor file)`);
    if (report.spool.files > 0) out.line(`spool           ${fmt(report.spool.pendingRecords)} spooled push(es) in ${report.spool.files} file(s), ingested at the next open`);
    out.line(`segments        ${report.segments} (${bytesText(report.segmentBytes)})`);
    for (const seg of s.segments) {
      await emit(out, dim(`  ${seg.file}  ${bytesText(seg.bytes)}${seg.sealed ? ' sealed' : ' active'}${seg.compacted ? ' compacted' : ''}`));
    }
    out.line(`on disk         ${bytesText(report.bytesOnDisk)}`);
    out.line(`store id        ${report.storeId ?? dim('none yet (written at the next writable open)')}`);
    if (s.liveWriter !== null) {
      const who = s.liveWriter.pid !== null ? `process ${s.liveWriter.pid}` : 'another process';
      out.line(`last close      ${green(`none yet: ${who} has the store open`)} ${dim('(shown as of this read, up to its last whole record)')}`);
    } else {
      out.line(
        `last close      ${lastShutdownClean === true ? green('clean') : red('not clean: the last writer did not close it')}${report.tornTailBytes > 0 ? `, ${report.tornTailBytes} byte(s) past the valid end` : ''}`,
      );
    }
    return 0;
  } finally {
    await store.close();
  }
};

/** Delayed and prioritised items among the unacked ones, read from `from` (`scheduledFrom`) on. */
function scheduledCounts(store: LogStore, from: number, before: number, nowMs: number): { delayed: number; nextDueMs: number; prioritized: number } {
  let delayed = 0;
  let prioritized = 0;
  let nextDueMs = Infinity;
  let after = from - 1;
  while (after < before - 1) {
    const page = store.read({ after, before, limit: DUMP_PAGE_ITEMS });
    if (page.length === 0) break;
    for (const item of page) {
      const notBefore = item.notBefore ?? 0;
      if (notBefore > nowMs) {
        delayed++;
        nextDueMs = Math.min(nextDueMs, notBefore);
      }
      if ((item.priority ?? 0) !== 0) prioritized++;
    }
    after = page[page.length - 1]!.seq;
  }
  return { delayed, nextDueMs, prioritized };
}

export const verify: Command = async (cli, { positionals }) => {
  const dir = oneDir('verify', positionals);
  requireStore(dir);
  const progress = new Progress(cli.err, !cli.json);
  let result;
  try {
    result = verifyStore(resolve(dir), {
      onProgress: progress.enabled ? (done, total) => progress.update(progressBar('verifying', done, total), done === total) : undefined,
    });
  } finally {
    progress.done();
  }
  const out = cli.out;
  if (cli.json) {
    out.line(JSON.stringify(result, null, 2));
  } else {
    out.line(`checked ${result.files} file(s), ${fmt(result.records)} record(s), ${bytesText(result.bytes)}`);
    for (const p of result.problems) {
      await emit(out, red(p.reason.includes(p.file) || p.reason.includes(basename(p.file)) ? p.reason : `${p.file} at offset ${p.offset}: ${p.reason}`));
      const where = damageText(p);
      if (where !== '') await emit(out, `  ${where}`);
    }
    for (const n of result.notes) await emit(out, dim(n));
    out.line(result.problems.length === 0 ? green('sound') : red(`${result.problems.length} problem(s)`));
  }
  return result.problems.length === 0 ? 0 : 1;
};

export const dump: Command = async (cli, { values, positionals }) => {
  const from = intOption('dump', 'from', values.from, 0);
  const limit = intOption('dump', 'limit', values.limit, Number.MAX_SAFE_INTEGER, 1);
  const format = formatOption('dump', cli, values.format, 'jsonl');
  const codec = codecOption('dump', values.codec);
  const dir = oneDir('dump', positionals);
  const store = await LogStore.open(dir, { readOnly: true });
  // Progress only when the items go elsewhere than the terminal that would show it.
  const progress = new Progress(cli.err, !cli.out.isTTY);
  try {
    const { nextSeq } = store.inspect();
    const total = from <= 1 ? Math.min(limit, store.inspect().count) : undefined;
    let after = Math.max(0, from - 1);
    let printed = 0;
    while (printed < limit) {
      const page = store.read({ after, before: nextSeq, limit: Math.min(DUMP_PAGE_ITEMS, limit - printed) });
      if (page.length === 0) break;
      for (const item of page) await emit(cli.out, showItem(format, item, undefined, codec));
      printed += page.length;
      after = page[page.length - 1]!.seq;
      progress.update(`dumped ${fmt(printed)}${total === undefined ? '' : ` / ${fmt(total)}`} item(s)`);
    }
    await cli.out.flush();
    return 0;
  } finally {
    progress.done();
    await store.close();
  }
};

async function readStdinLines(): Promise<string[]> {
  const lines: string[] = [];
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) lines.push(line);
  return lines;
}

export const push: Command = async (cli, { values, positionals }) => {
  if (positionals.length < 1) throw new UsageError('pq push needs a <dir>', 'push');
  const [dir, ...data] = positionals as [string, ...string[]];
  const durability = durabilityOption(values.durability);
  const schedule = scheduleOptions(values);
  const wait = waitOption('push', values.wait);
  const create = values.create === true;
  // Checked before the store is opened (or created): a refused key leaves nothing behind.
  const key = values.key;
  if (key !== undefined) {
    if (typeof key !== 'string' || !isValidKey(key)) throw new UsageError(`--key must be 1 to ${MAX_KEY_BYTES} UTF-8 bytes, got '${String(key)}'`, 'push');
    if (data.length !== 1) throw new UsageError(`--key takes exactly one DATA argument, got ${data.length === 0 ? 'none (stdin is not read with --key)' : data.length}`, 'push');
  }
  const open = (): Promise<LogStore> =>
    LogStore.open(dir, { ...wait, mustExist: !create }).catch((e: unknown) => {
      throw isQueueError(e, 'ERR_NOT_FOUND') ? new QueueError('ERR_NOT_FOUND', `${e.message} (pass --create to make one)`, { cause: e, file: e.file }) : e;
    });
  const nothing = (): UsageError => new UsageError('pq push got nothing to push: give DATA arguments, or lines on stdin (stdin was empty)', 'push');
  // A store that exists is opened before stdin is read: a store that cannot be opened is reported
  // before anything is consumed. One that --create would make is made only once there is
  // something to push.
  let store: LogStore | null = create && !isStore(dir) ? null : await open();
  let payloads: readonly string[];
  try {
    payloads = data.length > 0 ? data : await readStdinLines();
    if (payloads.length === 0) throw nothing();
  } catch (e) {
    await store?.close();
    throw e;
  }
  store ??= await open();
  const [tx] = await new Builder(store).durability(durability).open();
  try {
    const seqs = typeof key === 'string' ? [await tx.push(payloads[0]!, { ...schedule, key })] : await tx.pushMany(payloads, schedule);
    if (cli.json) cli.out.line(JSON.stringify({ count: seqs.length, seqs }));
    else for (const seq of seqs) await emit(cli.out, String(seq));
    return 0;
  } finally {
    await tx.close();
  }
};

export const pop: Command = async (cli, { values, positionals }) => {
  const count = intOption('pop', 'count', values.count, 1, 1);
  const format = formatOption('pop', cli, values.format, 'jsonl');
  const codec = codecOption('pop', values.codec);
  const ack = values['no-ack'] !== true;
  const wait = waitOption('pop', values.wait);
  const dir = oneDir('pop', positionals);
  // Acks are `lazy` (the default): written batch by batch, synced within the bound and by the
  // close below, so every ack is durable once `pq pop` exits; a power loss before that can only
  // redeliver popped items.
  const [tx, rx] = await new Builder(await LogStore.open(dir, { ...wait, mustExist: true })).durability('group').open();
  try {
    let taken = 0;
    let batchItems = 1;
    while (taken < count) {
      const batch: Reserved[] = [];
      let chars = 0;
      while (taken + batch.length < count && batch.length < batchItems && chars < POP_BATCH_CHARS) {
        const item = await reserveReady(rx);
        if (!item) break;
        batch.push(item);
        const line = showItem(format, item, item.deliveries, codec);
        chars += line.length;
        cli.out.line(line);
      }
      if (batch.length === 0) break;
      // At least once for the shell too: a batch is acked only after its lines reached the
      // operating system. If the reader is gone, this throws and close() returns the batch.
      await cli.out.flush();
      if (ack) await Promise.all(batch.map((item) => item.ack()));
      taken += batch.length;
      batchItems = Math.min(POP_BATCH_ITEMS, batchItems * 2);
    }
    return 0;
  } finally {
    await tx.close(); // unacked items (--no-ack, or a batch the reader never got) return to the store
  }
};

export const compact: Command = async (cli, { values, positionals }) => {
  const wait = waitOption('compact', values.wait);
  const dir = oneDir('compact', positionals);
  const store = await LogStore.open(dir, { ...wait, mustExist: true });
  const progress = new Progress(cli.err, !cli.json);
  const startedAt = performance.now();
  // Deleting acked segments is instant; rewriting sealed ones reports the bytes it has read.
  let rewriting = false;
  const showElapsed = (): void => {
    if (!rewriting) progress.update(`compacting... ${((performance.now() - startedAt) / 1000).toFixed(1)} s`, true);
  };
  showElapsed();
  const ticker = progress.enabled ? setInterval(showElapsed, 250) : undefined;
  try {
    const before = store.inspect().bytesOnDisk;
    let r;
    try {
      r = await store.compact({
        onProgress: progress.enabled
          ? (done, total) => {
              rewriting = true;
              progress.update(progressBar('compacting', done, total), done === total);
            }
          : undefined,
      });
    } finally {
      clearInterval(ticker);
      progress.done();
    }
    const after = store.inspect().bytesOnDisk;
    if (cli.json) {
      cli.out.line(JSON.stringify({ ...r, bytesOnDiskBefore: before, bytesOnDiskAfter: after }));
    } else {
      cli.out.line(
        `reclaimed ${bytesText(r.bytesReclaimed)}: ${r.segmentsDeleted} segment(s) deleted, ${r.segmentsRewritten} rewritten; ${bytesText(before)} -> ${bytesText(after)} on disk`,
      );
    }
    return 0;
  } finally {
    await store.close();
  }
};
