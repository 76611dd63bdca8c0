/** The store commands of `pq`: verify, dump, pop, compact, and what every command shares. */
import { readdirSync, statSync, type Stats } from 'node:fs';
import { basename, resolve } from 'node:path';
import {
  Builder,
  LogStore,
  QueueError,
  isQueueError,
  verifyStore,
  type CompactionResult,
  type Consumer,
  type LogStoreOptions,
  type Reserved,
} from '../index.js';
import { classifyEntry } from '../stores/log/engine/format.js';
import { UsageError, type ParsedArgs } from './args.js';
import { ConsumedError, consumerActive, ownerName, reachOwner, throughOwnerOrLock, withOwner, type Owner } from './owner.js';
import { Progress, type Output } from './output.js';
import {
  PAYLOAD_CODECS,
  bytesText,
  damageText,
  dim,
  fmt,
  green,
  progressBar,
  red,
  showItem,
  type Format,
  type PayloadCodec,
} from './text.js';

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
 * What a store directory holds: its log, or only the spool of pushes made while no process had
 * the queue open (`connect()` and `pq push` make the directory so), which the first process to
 * open the queue takes in.
 */
export type StoreKind = 'log' | 'spool';

/**
 * What `dir` holds, or the error for a path that holds no store: `ERR_NOT_FOUND` for a missing path
 * or a directory without a store in it (the answers `LogStore.open` gives with `mustExist`),
 * `ERR_STORE` for a path that is not a directory. A directory without a log that holds a spool, or
 * that `create` would make a store of, must hold nothing a store would not (`ERR_STORE`); one with
 * a log is checked by `LogStore.open`. With `create`, a missing or empty directory is null.
 */
export function storeKind(dir: string, create = false): StoreKind | null {
  let st: Stats | undefined;
  let names: string[];
  try {
    st = statSync(dir, { throwIfNoEntry: false });
    names = st?.isDirectory() ? readdirSync(dir) : [];
  } catch (error) {
    throw new QueueError('ERR_STORE', `Cannot read ${dir}: ${(error as Error).message}`, { cause: error, file: dir });
  }
  if (st === undefined) {
    if (create) return null;
    throw new QueueError('ERR_NOT_FOUND', `No store at ${dir}: no such directory`, { file: dir });
  }
  if (!st.isDirectory()) throw new QueueError('ERR_STORE', `Store path ${dir} exists and is not a directory`, { file: dir });
  const kinds = names.map(classifyEntry);
  if (kinds.includes('segment') || kinds.includes('cursor')) return 'log';
  const spooled = kinds.includes('spool');
  if (!spooled && !create)
    throw new QueueError('ERR_NOT_FOUND', `No store at ${dir}: the directory holds no segment or cursor file`, { file: dir });
  const foreign = names.filter((_, i) => kinds[i] === 'foreign');
  if (foreign.length > 0)
    throw new QueueError(
      'ERR_STORE',
      `${dir} is not a store directory: it holds ${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', ...' : ''}`,
      { file: dir },
    );
  return spooled ? 'spool' : null;
}

/**
 * Refuse a path that holds no store's log, for `verify` and `salvage`, which read its files without
 * opening the store: the answers of {@link storeKind}, and `ERR_NOT_FOUND` for a directory that
 * holds only spooled pushes (there is no log to read yet).
 */
export function requireStore(dir: string): void {
  if (storeKind(dir) === 'spool') {
    throw new QueueError(
      'ERR_NOT_FOUND',
      `No store at ${dir}: the directory holds no segment or cursor file, only pushes spooled before any process opened the queue`,
      { file: dir },
    );
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
    if (given !== undefined && given !== 'jsonl')
      throw new UsageError(`--json prints JSON Lines; it cannot be combined with --format ${given}`, command);
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

/**
 * The next item, or null once none is ready. `tryReserve` also answers null while the next item
 * waits for its delivery mark to be stored (an item handed out before: by a `pop --no-ack`, or by
 * a process that was killed); `ready` still counts such an item, so then this waits for it
 * instead of stopping as if the queue were empty.
 *
 * With `store`, pushes spooled while no process had the queue open count too: the pass that takes
 * them in starts when the queue opens and stores them as pushes (waiting for capacity as any push
 * does), so with nothing ready this waits for an item or for a pass, whichever comes first, and
 * stops only once a whole pass took nothing in.
 */
export async function reserveReady(rx: Consumer, store?: LogStore): Promise<Reserved | null> {
  for (;;) {
    const item = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null);
    if (item !== null || store === undefined) return item;
    const before = store.inspect().spool?.ingested ?? 0;
    const waiting = new AbortController();
    const reserving = rx.reserve({ signal: waiting.signal });
    const first = await Promise.race([reserving, store.ingestSpool().then(() => PASS_DONE)]);
    if (first !== PASS_DONE) return first as Reserved | null;
    waiting.abort();
    // An item handed out as the pass ended is this call's: it is returned, not dropped.
    const got = await reserving.catch(() => null);
    if (got !== null) return got;
    if ((store.inspect().spool?.ingested ?? 0) === before) return rx.tryReserve() ?? (rx.stats().ready > 0 ? rx.reserve() : null);
  }
}

const PASS_DONE = Symbol('the spool pass is done');

/** Write a line, waiting first when the output is backed up. */
export async function emit(out: Output, line: string): Promise<void> {
  if (!out.line(line)) await out.ready();
}

// ---------------------------------------------------------------------------------------------

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
      await emit(
        out,
        red(p.reason.includes(p.file) || p.reason.includes(basename(p.file)) ? p.reason : `${p.file} at offset ${p.offset}: ${p.reason}`),
      );
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
  // Only pushes spooled before any process opened the queue: its log, which dump prints, holds nothing yet.
  if (storeKind(dir) === 'spool') return 0;
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

/**
 * Why `pq pop` cannot take the lock that `locked` reports: a process that serves the queue holds
 * it. Items are not handed out through the endpoint, so pop says who has the queue and whether a
 * consumer of it is taking items (then it is `ConsumedError`, exit status 3). A holder that serves
 * nobody leaves `locked` as it was.
 */
async function refuseBesideOwner(dir: string, locked: QueueError): Promise<never> {
  const owner = await reachOwner(dir).catch(() => null);
  if (owner === null) throw locked;
  const consuming = await withOwner(owner, async (o) => (await consumerActive(o, await o.client.stats())).consuming).catch(() => null);
  if (consuming === null) throw locked;
  const who = ownerName(owner);
  if (consuming) {
    throw new ConsumedError(
      `The queue in ${dir} is consumed by ${who}: pq pop would compete with its consumer for the items, and items are not handed out through its endpoint. Take them in that process, or pop once it has closed the queue (--wait MS waits for that)`,
      owner.pid,
    );
  }
  throw new QueueError(
    'ERR_LOCKED',
    `${who[0]!.toUpperCase()}${who.slice(1)} has the queue in ${dir} open (no consumer of it is taking items now), and pq pop cannot take items through it: its endpoint takes pushes and the operator's commands, not pops. Pop once it has closed the queue (--wait MS waits for that)`,
    { cause: locked.cause, file: locked.file },
  );
}

export const pop: Command = async (cli, { values, positionals }) => {
  const count = intOption('pop', 'count', values.count, 1, 1);
  const format = formatOption('pop', cli, values.format, 'jsonl');
  const codec = codecOption('pop', values.codec);
  const ack = values['no-ack'] !== true;
  const wait = waitOption('pop', values.wait);
  const dir = oneDir('pop', positionals);
  // A directory that holds only spooled pushes is a store no process has opened yet: the open makes its log.
  const kind = storeKind(dir);
  let store: LogStore;
  try {
    store = await LogStore.open(dir, { ...wait, mustExist: kind === 'log' });
  } catch (error) {
    if (isQueueError(error, 'ERR_LOCKED')) await refuseBesideOwner(dir, error);
    throw error;
  }
  // Acks are `lazy` (the default): written batch by batch, synced within the bound and by the
  // close below, so every ack is durable once `pq pop` exits; a power loss before that can only
  // redeliver popped items.
  const [tx, rx] = await new Builder(store).durability('group').open();
  try {
    let taken = 0;
    let batchItems = 1;
    while (taken < count) {
      const batch: Reserved[] = [];
      let chars = 0;
      while (taken + batch.length < count && batch.length < batchItems && chars < POP_BATCH_CHARS) {
        const item = await reserveReady(rx, store);
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

/** A progress line for a compaction: its elapsed time, or the bytes of the rewrite once it reports them. */
function compactionProgress(cli: Cli): { onProgress: ((done: number, total: number) => void) | undefined; done(): void } {
  const progress = new Progress(cli.err, !cli.json);
  const startedAt = performance.now();
  // Deleting acked segments is instant; rewriting sealed ones reports the bytes it has read.
  let rewriting = false;
  const showElapsed = (): void => {
    if (!rewriting) progress.update(`compacting... ${((performance.now() - startedAt) / 1000).toFixed(1)} s`, true);
  };
  showElapsed();
  const ticker = progress.enabled ? setInterval(showElapsed, 250) : undefined;
  return {
    onProgress: progress.enabled
      ? (done, total) => {
          rewriting = true;
          progress.update(progressBar('compacting', done, total), done === total);
        }
      : undefined,
    done() {
      clearInterval(ticker);
      progress.done();
    },
  };
}

function reportCompaction(cli: Cli, r: CompactionResult, before: number, after: number, owner: Owner | null): number {
  const via = owner === null ? { via: 'lock' } : { via: 'endpoint', pid: owner.pid };
  if (cli.json) {
    cli.out.line(JSON.stringify({ ...r, bytesOnDiskBefore: before, bytesOnDiskAfter: after, ...via }));
  } else {
    cli.out.line(
      `reclaimed ${bytesText(r.bytesReclaimed)}: ${r.segmentsDeleted} segment(s) deleted, ${r.segmentsRewritten} rewritten; ${bytesText(before)} -> ${bytesText(after)} on disk${owner === null ? '' : ` (by ${ownerName(owner)}, which has the queue open)`}`,
    );
  }
  return 0;
}

/** The owner's bytes on disk, from its figures. */
async function ownerBytesOnDisk(owner: Owner): Promise<number> {
  const figures = await owner.client.stats();
  const store = figures.store as { bytesOnDisk?: unknown } | undefined;
  return typeof store?.bytesOnDisk === 'number' ? store.bytesOnDisk : 0;
}

export const compact: Command = async (cli, { values, positionals }) => {
  const wait = waitOption('compact', values.wait);
  const dir = oneDir('compact', positionals);
  const kind = storeKind(dir);
  return throughOwnerOrLock(
    dir,
    async (owner) => {
      // The owner compacts its own store; it reports no progress through the endpoint, so only the time shows.
      const progress = compactionProgress(cli);
      try {
        const before = await ownerBytesOnDisk(owner);
        const r = (await owner.client.compact()) as CompactionResult;
        return reportCompaction(cli, r, before, await ownerBytesOnDisk(owner), owner);
      } finally {
        progress.done();
      }
    },
    async () => {
      const store = await LogStore.open(dir, { ...wait, mustExist: kind === 'log' });
      try {
        const before = store.inspect().bytesOnDisk;
        const progress = compactionProgress(cli);
        let r: CompactionResult;
        try {
          r = await store.compact({ onProgress: progress.onProgress });
        } finally {
          progress.done();
        }
        return reportCompaction(cli, r, before, store.inspect().bytesOnDisk, null);
      } finally {
        await store.close();
      }
    },
  );
};
