/**
 * `pq stats`: the live figures of the process that has the queue open, asked through its endpoint
 * (ready, in flight, leased, delayed, counters since its open), or, when no process serves the
 * queue, what the store's files hold, read without a lock. `--json` says which in `view`.
 */
import { readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { nodeFileSystem } from '../fs/node-fs.js';
import { LogStore, QueueError } from '../index.js';
import { SPOOL_DIR } from '../stores/log/engine/format.js';
import { readSpoolBacklog } from '../stores/log/engine/spool-file.js';
import { UsageError } from './args.js';
import { emit, intOption, oneDir, storeKind, type Cli, type Command } from './commands.js';
import { busy, consumerActive, ownerName, reachOwner, settled, withOwner, type Owner } from './owner.js';
import { bold, bytesText, dim, fmt, green, red } from './text.js';

/** Items read at a time to count the delayed and prioritised ones. */
const PAGE_ITEMS = 256;

/** Why the owner could not be asked, when one serves: the files are read instead. */
interface LiveError {
  readonly code: string;
  readonly message: string;
}

/** Counters of the owner's queue that `--rates` turns into rates, and the names of those rates. */
const RATES = [
  ['pushed', 'pushesPerSecond', 'pushes'],
  ['acked', 'acksPerSecond', 'acks'],
  ['nacked', 'nacksPerSecond', 'nacks'],
] as const;

export const stats: Command = async (cli, { values, positionals }) => {
  const dir = oneDir('stats', positionals);
  const ratesMs = values.rates === undefined ? undefined : intOption('stats', 'rates', values.rates, 0, 1);
  const readOnly = values['read-only'] === true;
  if (readOnly && ratesMs !== undefined)
    throw new UsageError(
      '--rates measures the live figures of the process that has the queue open, which --read-only does not ask for',
      'stats',
    );
  const kind = storeKind(dir);
  let liveError: LiveError | null = null;
  if (!readOnly) {
    try {
      const owner = await reachOwner(dir);
      if (owner !== null) {
        const live = await withOwner(owner, (o) => liveView(o, ratesMs));
        return await showLive(cli, live);
      }
    } catch (error) {
      // An owner that cannot be asked (gone meanwhile, another protocol version): its files still can be read.
      if (!(error instanceof QueueError)) throw error;
      liveError = { code: error.code, message: error.message };
    }
  }
  const extra = { ...(ratesMs !== undefined ? { rates: null } : {}), ...(liveError !== null ? { liveError } : {}) };
  if (kind === 'spool') return showSpoolOnly(cli, dir, extra);
  return showFiles(cli, dir, extra);
};

// ---- The live view ---------------------------------------------------------------------------

interface Rates {
  readonly intervalMs: number;
  readonly pushed: number;
  readonly acked: number;
  readonly nacked: number;
  readonly pushesPerSecond: number;
  readonly acksPerSecond: number;
  readonly nacksPerSecond: number;
}

interface LiveView {
  readonly owner: Owner;
  readonly figures: Record<string, unknown>;
  readonly rates: Rates | undefined;
}

/** The owner's figures; with `ratesMs`, asked twice that far apart, and the counters' rates between. */
async function liveView(owner: Owner, ratesMs: number | undefined): Promise<LiveView> {
  const asked = await owner.client.stats();
  if (ratesMs === undefined) {
    const { consuming, figures } = await consumerActive(owner, asked);
    return { owner, figures: { ...figures, consuming }, rates: undefined };
  }
  const first = asked;
  const startedAt = performance.now();
  await new Promise((done) => setTimeout(done, ratesMs));
  const second = await owner.client.stats();
  // Items settled between the two answers are a consumer taking them, whatever the instant says.
  const figures: Record<string, unknown> = { ...second, consuming: busy(second) || settled(second) !== settled(first) };
  const intervalMs = Math.max(1, Math.round(performance.now() - startedAt));
  const delta = (name: string): number => Math.max(0, num(figures[name]) - num(first[name]));
  const perSecond = (count: number): number => Math.round((count * 10_000) / intervalMs) / 10;
  const pushed = delta('pushed');
  const acked = delta('acked');
  const nacked = delta('nacked');
  return {
    owner,
    figures,
    rates: {
      intervalMs,
      pushed,
      acked,
      nacked,
      pushesPerSecond: perSecond(pushed),
      acksPerSecond: perSecond(acked),
      nacksPerSecond: perSecond(nacked),
    },
  };
}

function num(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}

async function showLive(cli: Cli, { owner, figures, rates }: LiveView): Promise<number> {
  const { store: storeFigures, consuming, ...queue } = figures;
  const store = (storeFigures ?? {}) as Record<string, unknown>;
  const count = num(store.count);
  const spool = (store.spool ?? null) as {
    files: number;
    pendingRecords: number;
    ingested: number;
    tornBytes: number;
    problems: unknown[];
  } | null;
  const report = {
    view: 'live',
    pid: owner.pid,
    dir: store.dir,
    storeId: store.storeId ?? queue.storeId ?? null,
    consuming: consuming === true,
    unacked: count,
    ready: queue.ready,
    inFlight: queue.inFlight,
    leased: queue.leased,
    delayed: queue.delayed,
    deadLetters: queue.deadLetters,
    firstSeq: count > 0 ? store.lowWaterMark : null,
    nextSeq: store.nextSeq,
    spool,
    ...(rates !== undefined ? { rates } : {}),
    // Everything the owner reported: its queue's figures and counters since it opened, and its store's.
    queue,
    store,
  };
  const out = cli.out;
  if (cli.json) {
    out.line(JSON.stringify(report, null, 2));
    return 0;
  }
  out.line(`${bold('store')}           ${String(report.dir)}`);
  out.line(`live view       ${green(`the figures of ${ownerName(owner)}, which has the queue open`)} ${dim('(as it answered now)')}`);
  out.line(`ready           ${fmt(num(report.ready))}`);
  out.line(`in flight       ${fmt(num(report.inFlight))}${num(report.leased) > 0 ? `, ${fmt(num(report.leased))} of them leased` : ''}`);
  out.line(`delayed         ${fmt(num(report.delayed))}`);
  out.line(`unacked         ${fmt(count)}`);
  out.line(`dead letters    ${fmt(num(report.deadLetters))}`);
  out.line(`consumer        ${report.consuming ? 'taking items' : 'none taking items now'}`);
  const capacity = typeof queue.capacity === 'number' ? `${fmt(queue.capacity)} item(s)` : 'unbounded';
  out.line(
    `capacity        ${capacity}${typeof queue.capacityBytes === 'number' ? `, ${bytesText(queue.capacityBytes)}` : ''}; ${fmt(num(queue.pendingPushes))} push(es) pending`,
  );
  out.line(
    `since its open  pushed ${fmt(num(queue.pushed))}, acked ${fmt(num(queue.acked))}, nacked ${fmt(num(queue.nacked))}, redelivered ${fmt(num(queue.redelivered))}, retried ${fmt(num(queue.retried))}, dead-lettered ${fmt(num(queue.deadLettered))}, leases expired ${fmt(num(queue.leaseExpired))}`,
  );
  if (rates !== undefined) {
    out.line(
      `rates           ${RATES.map(([, rate, noun]) => `${rates[rate].toFixed(1)} ${noun}/s`).join(', ')} ${dim(`(over ${(rates.intervalMs / 1000).toFixed(1)} s)`)}`,
    );
  }
  out.line(
    `durability      ${String(queue.durability)}; acks ${String(queue.ackDurability)}${num(queue.unsyncedAcks) > 0 ? ` (${fmt(num(queue.unsyncedAcks))} not yet synced)` : ''}`,
  );
  out.line(
    `seq range       ${report.firstSeq === null ? '(empty)' : `${String(report.firstSeq)} .. ${num(report.nextSeq) - 1}`}   next seq ${String(report.nextSeq)}`,
  );
  if (spool !== null && (spool.files > 0 || spool.ingested > 0)) {
    out.line(
      `spool           ${fmt(spool.pendingRecords)} spooled push(es) in ${spool.files} file(s) not taken in yet; ${fmt(spool.ingested)} taken in since its open`,
    );
  }
  const segments = store.segments;
  if (Array.isArray(segments)) {
    const list = segments as { file: string; bytes: number; sealed: boolean; compacted: boolean }[];
    out.line(`segments        ${list.length} (${bytesText(list.reduce((a, x) => a + x.bytes, 0))})`);
    for (const seg of list)
      await emit(
        out,
        dim(`  ${seg.file}  ${bytesText(seg.bytes)}${seg.sealed ? ' sealed' : ' active'}${seg.compacted ? ' compacted' : ''}`),
      );
  } else if (typeof segments === 'number') {
    out.line(`segments        ${fmt(segments)}`);
  }
  out.line(`on disk         ${bytesText(num(store.bytesOnDisk))}`);
  out.line(`store id        ${String(report.storeId ?? dim('none yet'))}`);
  return 0;
}

// ---- The files, read without a lock ------------------------------------------------------------

type Extra = { readonly rates?: null; readonly liveError?: LiveError };

function showLiveError(cli: Cli, extra: Extra): void {
  if (extra.liveError !== undefined) cli.out.line(`live view       ${red(`not available: ${extra.liveError.message}`)}`);
  if (extra.rates === null)
    cli.out.line(`rates           ${dim('not known: no process serves the queue (they are measured on its live figures)')}`);
}

async function showFiles(cli: Cli, dir: string, extra: Extra): Promise<number> {
  // Read-only: no lock, no write, so a store another process has open can be inspected too.
  const store = await LogStore.open(dir, { readOnly: true });
  try {
    const s = store.inspect();
    // A store another process has open has not been shut down: the question does not apply yet.
    const lastShutdownClean = s.liveWriter !== null ? null : s.recovery.cleanShutdown;
    const firstSeq = s.count > 0 ? s.lowWaterMark : null;
    const scheduled = scheduledCounts(store, s.scheduledFrom, s.nextSeq, Date.now());
    const report = {
      view: 'read-only',
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
      ...extra,
    };
    const out = cli.out;
    if (cli.json) {
      out.line(JSON.stringify({ ...report, segmentFiles: s.segments }, null, 2));
      return 0;
    }
    out.line(`${bold('store')}           ${report.dir}`);
    showLiveError(cli, extra);
    out.line(`format version  ${report.formatVersion}`);
    out.line(`unacked         ${fmt(report.unacked)}`);
    out.line(`delayed         ${report.delayed === 0 ? '0' : `${fmt(report.delayed)} not yet due, the next at ${report.nextDueAt}`}`);
    if (report.prioritized > 0) out.line(`prioritized     ${fmt(report.prioritized)}`);
    out.line(`leased          ${dim('not known here: leases live in the process that has the queue open')}`);
    out.line(`seq range       ${firstSeq === null ? '(empty)' : `${firstSeq} .. ${report.nextSeq - 1}`}   next seq ${report.nextSeq}`);
    out.line(
      `cursor          low-water mark ${report.lowWaterMark}, ${report.ackedRangesAboveLowWaterMark} acked range(s) above it, ${bytesText(report.cursorBytes)}`,
    );
    if (report.deadLetters > 0)
      out.line(`dead letters    ${fmt(report.deadLetters)} (${bytesText(report.deadLetterBytes)}, held in the cursor file)`);
    if (report.spool.files > 0)
      out.line(
        `spool           ${fmt(report.spool.pendingRecords)} spooled push(es) in ${report.spool.files} file(s), ingested at the next open`,
      );
    out.line(`segments        ${report.segments} (${bytesText(report.segmentBytes)})`);
    for (const seg of s.segments) {
      await emit(
        out,
        dim(`  ${seg.file}  ${bytesText(seg.bytes)}${seg.sealed ? ' sealed' : ' active'}${seg.compacted ? ' compacted' : ''}`),
      );
    }
    out.line(`on disk         ${bytesText(report.bytesOnDisk)}`);
    out.line(`store id        ${report.storeId ?? dim('none yet (written at the next writable open)')}`);
    if (s.liveWriter !== null) {
      const who = s.liveWriter.pid !== null ? `process ${s.liveWriter.pid}` : 'another process';
      out.line(
        `last close      ${green(`none yet: ${who} has the store open`)} ${dim('(shown as of this read, up to its last whole record)')}`,
      );
    } else {
      out.line(
        `last close      ${lastShutdownClean === true ? green('clean') : red('not clean: the last writer did not close it')}${report.tornTailBytes > 0 ? `, ${report.tornTailBytes} byte(s) past the valid end` : ''}`,
      );
    }
    return 0;
  } finally {
    await store.close();
  }
}

/**
 * A directory that holds only pushes spooled while no process had the queue open: a store whose
 * log its first open makes. Shown as the files of an empty store, with the spool's backlog.
 */
async function showSpoolOnly(cli: Cli, dir: string, extra: Extra): Promise<number> {
  const at = resolve(dir);
  const backlog = readSpoolBacklog(nodeFileSystem, at, () => 0, 64 * 1024);
  const report = {
    view: 'read-only',
    dir: at,
    storeId: null,
    formatVersion: null,
    unacked: 0,
    firstSeq: null,
    nextSeq: 1,
    lowWaterMark: 1,
    ackedRangesAboveLowWaterMark: 0,
    segments: 0,
    segmentBytes: 0,
    cursorBytes: 0,
    deadLetters: 0,
    deadLetterBytes: 0,
    spool: { files: backlog.files, pendingRecords: backlog.records },
    delayed: 0,
    nextDueAt: null,
    prioritized: 0,
    leased: null,
    bytesOnDisk: spoolBytes(at),
    liveWriter: null,
    lastShutdownClean: null,
    tornTailBytes: 0,
    zeroTailBytes: 0,
    ...extra,
  };
  const out = cli.out;
  if (cli.json) {
    out.line(JSON.stringify({ ...report, segmentFiles: [] }, null, 2));
    return 0;
  }
  out.line(`${bold('store')}           ${report.dir}`);
  showLiveError(cli, extra);
  out.line(`log             ${dim('none yet: the first process to open the queue makes it')}`);
  out.line(`unacked         0`);
  out.line(
    `spool           ${fmt(report.spool.pendingRecords)} spooled push(es) in ${report.spool.files} file(s), ingested at the first open`,
  );
  out.line(`on disk         ${bytesText(report.bytesOnDisk)}`);
  return 0;
}

/** Bytes of the files in the spool directory (none when a file goes away as it is read). */
function spoolBytes(dir: string): number {
  const spoolDir = join(dir, SPOOL_DIR);
  let bytes = 0;
  let names: string[];
  try {
    names = readdirSync(spoolDir);
  } catch {
    return 0;
  }
  for (const name of names) bytes += statSync(join(spoolDir, name), { throwIfNoEntry: false })?.size ?? 0;
  return bytes;
}

/** Delayed and prioritised items among the unacked ones, read from `from` (`scheduledFrom`) on. */
function scheduledCounts(
  store: LogStore,
  from: number,
  before: number,
  nowMs: number,
): { delayed: number; nextDueMs: number; prioritized: number } {
  let delayed = 0;
  let prioritized = 0;
  let nextDueMs = Infinity;
  let after = from - 1;
  while (after < before - 1) {
    const page = store.read({ after, before, limit: PAGE_ITEMS });
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
