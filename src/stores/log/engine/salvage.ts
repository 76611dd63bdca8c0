// Reads every file of FORMAT.md §2–§5 read-only and writes what is intact into a new store (`pq salvage`).
/**
 * Salvage: copy every intact, unacked record of a store, damaged or not, into a new store, and say
 * exactly what could not be copied. The source is only read: its files are opened read-only, no
 * lock is taken, nothing is created, renamed, truncated or deleted in it, so running salvage
 * changes no byte, name, size or modification time there (a store in use by another process may
 * be salvaged, as a snapshot of what its files held while they were read).
 *
 * The records are found by the walk `verify` makes (`./store-walk.ts`): the recovery plan, then
 * every frame of every segment, going on past damage. The new store is written through LogStore's
 * engine itself (LogEngine), so it is a store like any other; it starts at seq 1 (a store's seqs are consecutive
 * from its next seq), so the items are renumbered in order and the result maps the old seqs to
 * the new ones, run by run.
 */
import { basename, dirname, join, resolve, sep } from 'node:path';
import { type OpenError, QueueError } from '../../../contract/errors.js';
import type { FileSystem } from '../../../fs/file-system.js';
import type { StoredItem } from '../../../contract/store.js';
import { expectation, knownKeys, nonEmptyString, optionsObject } from '../../../lib/validate.js';
import { CURSOR_FILE, LOCK_FILE, MAX_PAYLOAD_BYTES_CAP, MAX_RANGES_PER_RECORD, SPOOL_DIR, SPOOL_SUFFIX, classifyEntry } from './format.js';
import { readFully } from './segment-writer.js';
import { spoolFileIds } from './spool-file.js';
import { withSchedule } from './item-meta.js';
import { LogEngine } from './log-engine.js';
import type { RecoveryPlan } from './recovery-plan.js';
import { planBesideWriter } from './read-only.js';
import { liveHolder } from './store-dir.js';
import { StoreWalk, knownAcks, walkSegments, type DamagedRange, type KnownAcks, type SeqRange, type TailCut } from './store-walk.js';
import { changedByWriter, liveWriterNote, storeProblems } from './verify.js';

export interface SalvageOptions {
  /** @default the node:fs FileSystem, through the `persistent-queue` entry point */
  readonly fs?: FileSystem;
  /** Called as the source is read, with the bytes read so far and the total. */
  readonly onProgress?: ((doneBytes: number, totalBytes: number) => void) | undefined;
}

/** Source seqs `from .. from + count - 1` became destination seqs `to .. to + count - 1`. */
export interface SeqMapping {
  readonly from: number;
  readonly to: number;
  readonly count: number;
}

export interface SalvageResult {
  readonly src: string;
  readonly dst: string;
  /** Items written to the new store. */
  readonly copied: number;
  /** Their payload bytes. */
  readonly copiedBytes: number;
  /** Intact records not copied because they were acked. */
  readonly acked: number;
  /** Unacked seqs that no intact record holds. */
  readonly lost: { readonly count: number; readonly seqs: readonly SeqRange[] };
  /** The damaged byte ranges of the segment files, each with the unacked seqs it held. */
  readonly damaged: readonly DamagedRange[];
  /** How the source seqs map to the new store's. */
  readonly seqMap: readonly SeqMapping[];
  /**
   * Dead letters of the source copied into the new store's dead-letter queue, each with every
   * field and its bytes; they are numbered after the copied items, in their order, and `deadSeqMap`
   * says which old seq became which new one. Delivery marks are not copied (the items are new).
   */
  readonly deadLetters: number;
  readonly deadSeqMap: readonly SeqMapping[];
  /** Everything else worth knowing: the source's other problems, torn tails, an unreadable cursor. */
  readonly notes: readonly string[];
}

/** Items (and their bytes) written to the new store per append. */
const BATCH_ITEMS = 1024;
const BATCH_BYTES = 4 * 1024 * 1024;
const CHUNK_BYTES = 1024 * 1024;

export async function salvageStore(src: string, dst: string, options: SalvageOptions = {}): Promise<SalvageResult> {
  nonEmptyString('src', src);
  nonEmptyString('dst', dst);
  const raw = optionsObject('options', options);
  knownKeys('options', raw, ['fs', 'onProgress']);
  const opts = raw as SalvageOptions;
  const fs = opts.fs;
  if (fs === undefined)
    throw new TypeError('Expected `fs` to be a FileSystem: this entry has no default (the `persistent-queue` entry uses node:fs)');
  if (opts.onProgress !== undefined && typeof opts.onProgress !== 'function')
    throw new TypeError(expectation('onProgress', 'a function', opts.onProgress));
  const from = canonical(fs, resolve(src));
  const to = canonical(fs, resolve(dst));
  if (to === from || to.startsWith(from.endsWith(sep) ? from : from + sep)) {
    throw new RangeError(`Expected \`dst\` to lie outside \`src\`, got ${dst} inside ${src}: salvage never writes into the store it reads`);
  }
  refuseExistingDestination(fs, resolve(dst));
  const source = readSource(fs, resolve(src));
  const store = await LogEngine.open(resolve(dst), { fs, maxItemBytes: MAX_PAYLOAD_BYTES_CAP, autoCompact: false });
  try {
    await store.open();
    return await copy(fs, resolve(src), store, source, opts.onProgress);
  } finally {
    await store.close();
  }
}

/** `path` with symbolic links resolved as far as it exists, so that `dst` inside `src` is seen through a link too. */
function canonical(fs: FileSystem, path: string): string {
  if (fs.realpath === undefined) return path;
  if (fs.stat(path) !== null) return fs.realpath(path);
  const parent = dirname(path);
  return parent === path ? path : join(canonical(fs, parent), basename(path));
}

/** The destination must be new: missing, or an empty directory. Checked before anything is written. */
function refuseExistingDestination(fs: FileSystem, dst: string): void {
  const st = fs.stat(dst);
  if (st === null) return;
  if (st.isDirectory && fs.readdir(dst).length === 0) return;
  const what = st.isDirectory ? 'a directory that is not empty' : 'not a directory';
  throw new QueueError(
    'ERR_EXISTS',
    `${dst} exists and is ${what}: salvage writes only into a new store (a missing path or an empty directory)`,
    { file: dst },
  );
}

interface Source extends KnownAcks {
  readonly plan: RecoveryPlan;
  readonly planProblems: readonly OpenError[];
  /** The live process that held the source as it was read, or null. */
  readonly holder: { readonly pid: number | null } | null;
}

/** Plan the source read-only; refuse a path that is not a store, or a store this version cannot read. */
function readSource(fs: FileSystem, src: string): Source {
  const st = fs.stat(src);
  if (st === null) throw new QueueError('ERR_NOT_FOUND', `No store at ${src}: no such directory`, { file: src });
  if (!st.isDirectory) throw new QueueError('ERR_STORE', `Store path ${src} exists and is not a directory`, { file: src });
  const planProblems: OpenError[] = [];
  const holder = liveHolder(fs, src);
  let plan: RecoveryPlan;
  try {
    plan = planBesideWriter(
      fs,
      src,
      { maxRangesPerRecord: MAX_RANGES_PER_RECORD, readAheadBytes: CHUNK_BYTES },
      planProblems,
      holder !== null,
    );
  } catch (error) {
    throw new QueueError('ERR_STORE', `Cannot read ${src}: ${(error as Error)?.message ?? String(error)}`, { cause: error, file: src });
  }
  if (!plan.names.some((n) => classifyEntry(n) === 'segment' || classifyEntry(n) === 'cursor'))
    throw new QueueError('ERR_NOT_FOUND', `No store at ${src}: the directory holds no segment or cursor file`, { file: src });
  const newer = planProblems.find((p) => p.code === 'ERR_UNSUPPORTED_VERSION');
  if (newer !== undefined) throw newer;
  return { plan, planProblems, holder, ...knownAcks(fs, src, plan, planProblems) };
}

/** Walk the source and append its intact unacked records to `store`, in batches. */
async function copy(
  fs: FileSystem,
  src: string,
  store: LogEngine,
  source: Source,
  onProgress: SalvageOptions['onProgress'],
): Promise<SalvageResult> {
  const { plan, acks } = source;
  const segments = walkSegments(fs, src, plan);
  const total = segments.reduce((sum, s) => sum + (fs.stat(s.path)?.size ?? 0), 0);
  const walk = new StoreWalk(fs, segments, {
    acks,
    firstSeq: source.firstSeq,
    durableNextSeq: source.durableNextSeq,
    chunkBytes: CHUNK_BYTES,
    liveWriter: source.holder !== null,
  });
  const seqMap: SeqMapping[] = [];
  let batch: StoredItem[] = [];
  let batchBytes = 0;
  let next = 1;
  let copiedBytes = 0;
  let acked = 0;
  for (const r of walk.walk()) {
    if (acks.has(r.seq)) {
      acked++;
      continue;
    }
    const run = seqMap.at(-1);
    if (run !== undefined && run.from + run.count === r.seq && run.to + run.count === next)
      seqMap[seqMap.length - 1] = { ...run, count: run.count + 1 };
    else seqMap.push({ from: r.seq, to: next, count: 1 });
    // The item keeps its priority, not-before time, group and fire (the new store rolls to a segment
    // that holds them), and its spool origin, so the copy of the spool below is not ingested twice.
    const item = withSchedule(next++, r.payload.slice(), r);
    batch.push(r.spool === undefined ? item : { ...item, spool: r.spool });
    batchBytes += r.payload.length;
    copiedBytes += r.payload.length;
    if (batch.length >= BATCH_ITEMS || batchBytes >= BATCH_BYTES) {
      await store.append(batch, false);
      batch = [];
      batchBytes = 0;
      onProgress?.(walk.bytesWalked, total);
    }
  }
  // The last batch is synced; the close that follows checkpoints the new store.
  if (batch.length > 0) await store.append(batch, true);
  const dead = plan.cursor !== null ? plan.deliveries.dead : [];
  const deadSeqMap: SeqMapping[] = [];
  for (let i = 0; i < dead.length; i += BATCH_ITEMS) {
    const run = dead.slice(i, i + BATCH_ITEMS).map((d, k) => ({ ...d, seq: next + k }));
    run.forEach((d, k) => {
      const from = dead[i + k]!.seq;
      const last = deadSeqMap.at(-1);
      if (last !== undefined && last.from + last.count === from && last.to + last.count === d.seq)
        deadSeqMap[deadSeqMap.length - 1] = { ...last, count: last.count + 1 };
      else deadSeqMap.push({ from, to: d.seq, count: 1 });
    });
    await store.append(
      run.map((d) => ({ seq: d.seq, bytes: d.bytes })),
      false,
    );
    await store.deadLetter(run);
    next += run.length;
  }
  onProgress?.(total, total);
  const spooled = await copySpool(fs, src, store, plan);
  const notes = [...(source.note !== null ? [source.note] : []), ...walk.tails.map(tailText), ...spooled];
  // A segment the live writer deleted or cut while the walk read it, every record of which the
  // cursor acks now, cost nothing: what salvage could not read there was acked meanwhile.
  const settled = new Set(source.holder !== null ? changedByWriter(fs, src, walk.damages) : []);
  for (const d of settled)
    notes.push(
      `${basename(d.file)}: changed by the live writer while salvage read it (deleted, or its preallocated zeros cut before a seal); the cursor acks every record salvage had not seen acked there, so none of them is lost`,
    );
  const lost = withoutRanges(
    walk.lost,
    [...settled].flatMap((d) => d.lostSeqs),
  );
  if (plan.cursor === null && plan.names.includes(CURSOR_FILE)) {
    notes.push(`${CURSOR_FILE} could not be read whole: its dead letters (if it held any) are not copied`);
  }
  if (source.holder !== null) notes.push(liveWriterNote(source.holder));
  else if (plan.names.includes(LOCK_FILE)) {
    notes.push(
      `${LOCK_FILE} is present: the store is in use, or its last user did not close it; the copy holds what its files held as they were read`,
    );
  }
  for (const p of storeProblems(src, plan, source.planProblems, segments, walk, settled)) {
    if (p.end === undefined) notes.push(p.reason);
  }
  return {
    src,
    dst: store.dir,
    copied: next - 1 - dead.length,
    copiedBytes,
    acked,
    lost: { count: lost.reduce((n, r) => n + r.last + 1 - r.first, 0), seqs: lost },
    damaged: walk.damages.filter((d) => !settled.has(d)),
    seqMap,
    deadLetters: dead.length,
    deadSeqMap,
    notes,
  };
}

/** The seqs of `ranges` (in order, disjoint) that are in none of `removed`. */
function withoutRanges(ranges: readonly SeqRange[], removed: readonly SeqRange[]): SeqRange[] {
  if (removed.length === 0) return [...ranges];
  const cuts = [...removed].sort((a, b) => a.first - b.first);
  const out: SeqRange[] = [];
  for (const r of ranges) {
    let first = r.first;
    for (const c of cuts) {
      if (c.last < first || c.first > r.last) continue;
      if (c.first > first) out.push({ first, last: c.first - 1 });
      first = Math.max(first, c.last + 1);
      if (first > r.last) break;
    }
    if (first <= r.last) out.push({ first, last: r.last });
  }
  return out;
}

function tailText(t: TailCut): string {
  const torn = t.bytes - t.zeroBytes;
  return torn === 0
    ? `${t.file}: ${t.zeroBytes} zero bytes after the last record at offset ${t.offset} (preallocated space, not data)`
    : `${t.file}: a torn tail of ${torn} bytes at offset ${t.offset} (a record never completed, which open would cut; not copied)`;
}

/**
 * The spool's files, copied as they are into the new store's spool directory, with what the
 * source's checkpoint says was ingested of each (the copied items carry the rest): the next owner
 * of the new store ingests each record the source had not, and none it had. Returns notes.
 */
async function copySpool(fs: FileSystem, src: string, store: LogEngine, plan: RecoveryPlan): Promise<string[]> {
  const ids = spoolFileIds(fs, src);
  if (ids.length === 0) return [];
  for (const e of plan.cursor?.spool ?? []) store.noteSpoolProgress(e.file, e.records);
  const to = join(store.dir, SPOOL_DIR);
  fs.mkdirp(to, 0o700);
  for (const id of ids) {
    const name = id + SPOOL_SUFFIX;
    const fd = fs.open(join(src, SPOOL_DIR, name), 'read');
    try {
      const size = fs.size(fd);
      const buf = new Uint8Array(size);
      readFully(fs, fd, buf, 0, size, 0);
      const out = fs.open(join(to, name), 'create', 0o600);
      try {
        fs.write(out, buf, 0, size, 0);
        await fs.fsync(out);
      } finally {
        fs.close(out);
      }
    } finally {
      fs.close(fd);
    }
  }
  await fs.fsyncDir(to);
  await fs.fsyncDir(store.dir);
  return [`${ids.length} spool file(s) copied into ${to}: the next owner of the new store ingests what the source had not`];
}
