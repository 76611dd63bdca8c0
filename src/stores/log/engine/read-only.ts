// A read-only open: the recovery plan of FORMAT.md §6, kept in memory instead of applied.
/**
 * What a store opened with `readOnly` serves from. The plan is the one open makes (every file
 * check, the tail rule), but nothing it decides is carried out: torn tails are read up to their
 * valid end instead of cut, stray and superseded files are left where they are, no lock is taken.
 *
 * Another process may be writing the store meanwhile. Whether one holds it is asked first (the
 * file system's `lockHolder`, which reads the lock file and takes nothing): a live writer's active
 * segment ends in a write in progress and in space it has not written yet, so it is scanned with
 * the tail table's `liveWriter` input, which ends the data seen at the last whole frame and calls
 * nothing after it torn; damage below the checkpoint's durable point, and in sealed segments, is
 * still damage. The plan reads the segment headers first, then the cursor, then the active
 * segment, so the data it sees covers everything the cursor it read describes; it keeps every
 * segment's descriptor open, so a segment the writer deletes or replaces later still reads as it
 * was. A writer that rolls or compacts while the plan runs can make the files disagree with each
 * other: then the plan is made again, as long as the directory (or its holder) keeps changing
 * between attempts or the failure differs from the last one. The same failure twice over an
 * unchanged directory is real and reported.
 */
import { join } from 'node:path';
import type { FileSystem } from '../../../fs/file-system.js';
import type { AckSet } from './cursor.js';
import type { DeliveryState } from './delivery-state.js';
import { CURSOR_FILE, IDENTITY_FILE_BYTES, classifyEntry } from './format.js';
import type { Segment } from './layout.js';
import type { ResolvedOptions } from './options.js';
import type { LogStoreRecoveryInfo } from './recovery-apply.js';
import { planRecovery, type PlanOptions, type RecoveryPlan } from './recovery-plan.js';
import type { OpenError } from '../../../contract/errors.js';
import { liveHolder } from './store-dir.js';
import { readSpoolBacklog, type SpoolBacklog } from './spool-file.js';
import { KeyTable } from '../../../contract/records/keys.js';
import type { ScheduleTable } from '../../../contract/schedule-table.js';
import type { StoredSchedule } from '../../../contract/store.js';
import { scanKeys } from './key-scan.js';

/** Plans made at most, while the directory keeps changing under them. */
const MAX_ATTEMPTS = 8;

export interface ReadOnlyView {
  readonly segments: Segment[];
  readonly acks: AckSet;
  readonly nextSeq: number;
  /** Bytes of every store file when the view was taken. */
  readonly bytesOnDisk: number;
  readonly cursorBytes: number;
  /** The cursor file's version (1 when there is none). */
  readonly cursorVersion: number;
  /** Delivery marks and dead letters, redrives judged as open judges them. */
  readonly deliveries: DeliveryState;
  readonly recovery: LogStoreRecoveryInfo;
  /** The live process that held the store when the view was taken (`pid` null when not known), or null. */
  readonly liveWriter: { readonly pid: number | null } | null;
  /** The spool's files, and their records not ingested as of the cursor's checkpoint (FORMAT §14.3). */
  readonly spool: SpoolBacklog;
  /** The schedules, with the progress of the items fired since the checkpoint (FORMAT §4.7). */
  readonly schedules: readonly StoredSchedule[];
}

/** Plan `dir` without writing, retrying while another process changes it. */
export async function readOnlyView(fs: FileSystem, dir: string, opts: ResolvedOptions): Promise<ReadOnlyView> {
  // The failure of the last attempt, when the directory did not change during it.
  let lastFailure: string | undefined;
  for (let attempt = 1; ; attempt++) {
    const before = fingerprint(fs, dir);
    const holder = liveHolder(fs, dir);
    let plan: RecoveryPlan;
    try {
      plan = planRecovery(fs, dir, { ...opts, keepReadFds: true, liveWriter: holder !== null });
    } catch (e) {
      // A writer that is not known to be live (a file system that cannot tell, a holder whose pid
      // this process cannot see) overwrites preallocated space without changing a name or a size,
      // so a read torn by one of its writes looks like damage over an unchanged directory. Damage
      // is taken for real once the same failure is met twice in a row with the directory unchanged.
      const failure = e instanceof Error ? e.message : String(e);
      const unchanged = fingerprint(fs, dir) === before && holderKey(liveHolder(fs, dir)) === holderKey(holder);
      if (attempt >= MAX_ATTEMPTS || (unchanged && failure === lastFailure)) throw e;
      lastFailure = unchanged ? failure : undefined;
      await new Promise((r) => setTimeout(r, attempt * 5));
      continue;
    }
    return viewOf(fs, dir, plan, holder, opts);
  }
}

/**
 * `planRecovery` for a tool that reads a store beside its writer (verify, salvage), planned again
 * while a live writer changes the directory under the plan: a roll cuts the active segment's
 * preallocated zeros before sealing it and compaction deletes segments, so a read the plan sized
 * before the change comes up short. An attempt that failed, or found problems, while the directory
 * changed is dropped with its problems; one over a directory that did not change stands, and so
 * does the last of MAX_ATTEMPTS. Without a live writer this is `planRecovery`, once. Synchronous:
 * the attempts follow one another at once (the writer's change is done when the names and sizes
 * show it).
 */
export function planBesideWriter(
  fs: FileSystem,
  dir: string,
  opts: Omit<PlanOptions, 'onProblem' | 'liveWriter'>,
  problems: OpenError[],
  liveWriter: boolean,
): RecoveryPlan {
  const onProblem = (p: OpenError): void => {
    problems.push(p);
  };
  for (let attempt = 1; ; attempt++) {
    const before = liveWriter ? fingerprint(fs, dir) : '';
    const mark = problems.length;
    let plan: RecoveryPlan;
    try {
      plan = planRecovery(fs, dir, { ...opts, onProblem, liveWriter });
    } catch (e) {
      if (!liveWriter || attempt >= MAX_ATTEMPTS || fingerprint(fs, dir) === before) throw e;
      problems.length = mark;
      continue;
    }
    if (!liveWriter || problems.length === mark || attempt >= MAX_ATTEMPTS || fingerprint(fs, dir) === before) return plan;
    problems.length = mark;
  }
}

function holderKey(holder: { readonly pid: number | null } | null): string {
  return holder === null ? 'none' : `pid:${holder.pid ?? '?'}`;
}

/**
 * Names and sizes of the store's files: equal fingerprints mean nothing moved in between. The
 * endpoint's socket is no store file (its owner replaces it as it starts serving).
 */
function fingerprint(fs: FileSystem, dir: string): string {
  try {
    const names = fs
      .readdir(dir)
      .filter((n) => classifyEntry(n) !== 'os-metadata' && classifyEntry(n) !== 'endpoint')
      .sort();
    return names.map((n) => `${n}:${fs.stat(join(dir, n))?.size ?? '-'}`).join('/');
  } catch {
    return `unreadable:${Math.random()}`;
  }
}

function viewOf(
  fs: FileSystem,
  dir: string,
  plan: RecoveryPlan,
  liveWriter: { readonly pid: number | null } | null,
  opts: ResolvedOptions,
): ReadOnlyView {
  const acks = plan.acks;
  // ACK records past the data (an unsynced crash under `none`, or a writer that appended and
  // acked after the plan read the active segment): the seqs in between are acked, as open does.
  if (plan.raiseTo > plan.dataNext) acks.add(plan.dataNext, plan.raiseTo);
  const scan = plan.activeScan;
  const active = plan.segments[plan.segments.length - 1];
  let bytesOnDisk = 0;
  let activeFileBytes = 0;
  for (const s of plan.segments) {
    if (s !== active) bytesOnDisk += s.bytes;
  }
  if (active !== undefined) {
    try {
      activeFileBytes = fs.size(active.readFd);
    } catch {
      activeFileBytes = active.bytes;
    }
  }
  const cursorBytes = fs.stat(join(dir, CURSOR_FILE))?.size ?? 0;
  // Beside a live writer the bytes after the last whole frame are its write in progress and its
  // preallocated space: nothing an open would cut, so neither torn nor a zero tail.
  const tail = scan === null || liveWriter !== null ? 0 : Math.max(0, activeFileBytes - scan.validEnd);
  const torn = scan !== null && !scan.tornZero ? tail : 0;
  return {
    segments: plan.segments,
    acks,
    nextSeq: plan.raiseTo,
    bytesOnDisk: bytesOnDisk + activeFileBytes + cursorBytes + (plan.identity !== null ? IDENTITY_FILE_BYTES : 0),
    cursorBytes,
    cursorVersion: plan.cursor?.version ?? 1,
    deliveries: plan.deliveries,
    recovery: {
      cleanShutdown: plan.cursor !== null ? plan.cursor.clean : plan.segments.length === 0,
      created: false,
      tornBytes: torn,
      zeroTailBytes: tail - torn,
      tornFiles: [],
      strayFilesDeleted: [],
      supersededDeleted: [],
      nextSeqRaisedFrom: plan.raiseTo > plan.dataNext ? plan.dataNext : null,
      storeId: plan.identity,
      identityCreated: false,
    },
    liveWriter,
    spool: spoolOf(fs, dir, plan),
    schedules: schedulesOf(fs, plan, opts),
  };
}

/**
 * The schedules of the checkpoint and its records, raised by the fires of the frames after the
 * checkpoint, as open finds them; with no schedule, nothing is read.
 */
function schedulesOf(fs: FileSystem, plan: RecoveryPlan, opts: ResolvedOptions): StoredSchedule[] {
  const cursor = plan.cursor;
  if (cursor === null || cursor.schedules.size === 0) return [];
  const table: ScheduleTable = cursor.schedules.clone();
  try {
    scanKeys(fs, plan.segments, cursor.checkpointNextSeq, opts.readAheadBytes, new KeyTable(), undefined, table);
  } catch {
    // A writer changed the segments under the read: the checkpoint's progress stands (it may lag).
    return cursor.schedules.list();
  }
  return table.list();
}

function spoolOf(fs: FileSystem, dir: string, plan: RecoveryPlan): SpoolBacklog {
  const ingested = new Map((plan.cursor?.spool ?? []).map((e) => [e.file, e.records]));
  try {
    return readSpoolBacklog(fs, dir, (file) => ingested.get(file) ?? 0, 64 * 1024);
  } catch {
    // The spool is being written or finished under us: reported as unknown, never as damage.
    return { files: 0, records: 0 };
  }
}
