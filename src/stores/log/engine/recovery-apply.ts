// Implements FORMAT.md §6 "Recovery decision table": the writing half of recovery.
/**
 * Recovery, part two: carry out a plan of `./recovery-plan.ts`. These are the first writes of an
 * open: stray and superseded files go, torn tails are kept in side files and cut, the active
 * segment is made durable (rewritten first after an unclean shutdown), and a fresh checkpoint is
 * written.
 */
import { join } from 'node:path';
import type { FileSystem } from '../../../fs/file-system.js';
import type { CursorLog } from './cursor-log.js';
import { isStoreFull, type Durability } from './durability.js';
import { CURSOR_FILE, SEGMENT_VERSION_PLAIN, TORN_INFIX, parseSegmentName } from './format.js';
import { writeIdentity } from './identity.js';
import { closeQuietly, type SegmentLayout } from './layout.js';
import type { ResolvedOptions } from './options.js';
import type { RecoveryPlan } from './recovery-plan.js';
import { nextSegmentVersion, readFully, type SegmentWriter } from './segment-writer.js';
import { scanKeys } from './key-scan.js';
import { spoolFileIds } from './spool-file.js';

/** What recovery found and did when the store was opened. */
export interface LogStoreRecoveryInfo {
  /** The previous `close()` completed (no crash since); true for a store this open created. */
  readonly cleanShutdown: boolean;
  /** This open created the store: the directory held no segment or cursor file. */
  readonly created: boolean;
  /** Bytes of torn records cut off the tails (segment and cursor), each kept in a side file. */
  readonly tornBytes: number;
  /** All-zero bytes cut off the tails: preallocated space, or a tail the file system zero-filled (F3). */
  readonly zeroTailBytes: number;
  /** Side files holding the cut torn bytes. */
  readonly tornFiles: readonly string[];
  /** Stray files deleted, never read: tmp files, and a last segment whose creation a crash interrupted (header incomplete, no records). */
  readonly strayFilesDeleted: readonly string[];
  /** Segments deleted because a completed compaction replaced them. */
  readonly supersededDeleted: readonly string[];
  /** When ACK records referenced seqs past the recovered data (possible only under `none`), the next seq was raised from this value. */
  readonly nextSeqRaisedFrom: number | null;
  /**
   * The store's identity (FORMAT §13): created with the store and kept across reopens. Null only
   * for a read-only open of a store written before identities existed (a writable open gives it one).
   */
  readonly storeId: string | null;
  /** This open wrote a new identity file (file check 21). */
  readonly identityCreated: boolean;
}

export interface RecoveryParts {
  readonly fs: FileSystem;
  readonly dir: string;
  readonly opts: ResolvedOptions;
  readonly durability: Durability;
  readonly layout: SegmentLayout;
  readonly writer: SegmentWriter;
  readonly cursor: CursorLog;
}

interface CutTally {
  tornBytes: number;
  zeroTailBytes: number;
  tornFiles: string[];
}

/** Carry out `plan`; the store's parts hold the recovered state afterwards. */
export async function applyRecovery(plan: RecoveryPlan, p: RecoveryParts): Promise<LogStoreRecoveryInfo> {
  const { fs, dir, writer, layout, durability } = p;
  for (const n of plan.stray) fs.unlink(join(dir, n));
  for (const n of plan.superseded) fs.unlink(join(dir, n));
  const cut: CutTally = { tornBytes: 0, zeroTailBytes: 0, tornFiles: [] };
  const scan = plan.activeScan;
  const activeSeg = plan.segments[plan.segments.length - 1];
  if (scan !== null && scan.row.verdict === 'torn') await cutTail(p, activeSeg!.path, scan.validEnd, scan.tornZero, cut);
  if (plan.cursor !== null && plan.cursor.row.verdict === 'torn')
    await cutTail(p, join(dir, CURSOR_FILE), plan.cursor.validEnd, plan.cursor.tornZero, cut);

  layout.list = plan.segments;
  p.cursor.acks = plan.acks;
  p.cursor.deliveries = plan.deliveries;
  // The fresh checkpoint below keeps the version the cursor has: a version-1 store stays version 1.
  p.cursor.version = plan.cursor?.version ?? p.cursor.version;
  writer.nextSeq = plan.dataNext;
  if (activeSeg !== undefined) {
    writer.start(activeSeg, fs.open(activeSeg.path, 'readWrite'), scan!);
    // After a failed fsync the previous session's tail may sit in the page cache as clean pages
    // that never reached the disk, and an fdatasync now would write nothing. Unless the previous
    // session closed cleanly, write the tail past the last point the checkpoint knows durable
    // back in place (same bytes; at most one segment), so that the fdatasync below really makes
    // it durable.
    if (plan.cursor === null || !plan.cursor.clean) writer.rewriteTail(scan!.durableEnd, activeSeg.bytes);
    // After a crash the tail may sit only in the page cache: make it durable before anything is
    // served from it (Kafka's "phantom messages").
    await writer.syncActive();
    if (durability.failure !== null) throw durability.failure;
    if (activeSeg.seal !== null) {
      // Crashed between sealing and creating the next segment: start it now.
      writer.detach();
      const { seg, fd } = await writer.createSegment(activeSeg.seal.endSeq, nextSegmentVersion(scan!.need));
      layout.list.push(seg);
      writer.start(seg, fd);
    }
  } else {
    const { seg, fd } = await writer.createSegment(1, SEGMENT_VERSION_PLAIN);
    layout.list = [seg];
    writer.start(seg, fd);
  }
  let raisedFrom: number | null = null;
  if (plan.raiseTo > writer.nextSeq) {
    raisedFrom = writer.nextSeq;
    p.cursor.acks.add(writer.nextSeq, plan.raiseTo);
    // Record the raise in the data itself: seal the active segment with the raised end seq.
    await writer.roll(plan.raiseTo);
    writer.nextSeq = plan.raiseTo;
  }
  if (durability.failure !== null) throw durability.failure;
  // The keys: the checkpoint's, then those of the frames written after it (FORMAT §4.6), before
  // the fresh checkpoint below writes them all.
  const fromSeq = plan.cursor?.checkpointNextSeq ?? 1;
  p.cursor.checkpointNextSeq = fromSeq;
  for (const k of plan.cursor?.keys ?? []) p.cursor.keys.add(k);
  // How far each spool file was ingested (FORMAT §14.3): the checkpoint's table, then the origins
  // of the ITEM frames after it, read in the same pass as their keys.
  for (const e of plan.cursor?.spool ?? []) p.cursor.spool.set(e.file, e.records);
  // The schedules (FORMAT §4.7): the checkpoint's and its records', raised by the fires of the ITEM
  // frames after it, read in the same pass.
  if (plan.cursor !== null) p.cursor.schedules = plan.cursor.schedules.clone();
  scanKeys(fs, layout.list, fromSeq, p.opts.readAheadBytes, p.cursor.keys, p.cursor.spool, p.cursor.schedules);
  // A file no longer in the spool directory was ingested whole and deleted, durably: its entry goes.
  const present = new Set(spoolFileIds(fs, dir));
  for (const e of p.cursor.spool.list()) if (!present.has(e.file)) p.cursor.spool.forget(e.file);
  await freshCheckpoint(p, plan);
  const created = !plan.names.some((n) => n === CURSOR_FILE || parseSegmentName(n) !== null);
  // A new store always gets a new identity, even beside an identity file (left by a creation that
  // crashed, or by a store whose other files were deleted): its seqs start at 1 again, and under
  // the old identity they would name items that store held. The fsync of the directory below
  // makes the rename durable before the open resolves, so no identity is handed out that a crash
  // could take back.
  const keep = created ? null : plan.identity;
  const storeId = keep ?? (await writeIdentity(fs, dir, p.opts.fileMode));
  await fs.fsyncDir(dir);
  if (durability.failure !== null) throw durability.failure;
  p.cursor.durableLwm = p.cursor.acks.lwm;
  return {
    cleanShutdown: created || plan.cursor?.clean === true,
    created,
    tornBytes: cut.tornBytes,
    zeroTailBytes: cut.zeroTailBytes,
    tornFiles: cut.tornFiles,
    strayFilesDeleted: plan.stray,
    supersededDeleted: plan.superseded,
    nextSeqRaisedFrom: raisedFrom,
    storeId,
    identityCreated: keep === null,
  };
}

/**
 * A fresh checkpoint at every open: it drops stale ACK records, clears the CLEAN flag, and is
 * written over data made durable just before. On a full disk the store serves with the existing
 * cursor instead of refusing to open (it would stay wedged until space was freed by hand).
 */
async function freshCheckpoint(p: RecoveryParts, plan: RecoveryPlan): Promise<void> {
  try {
    await p.cursor.writeCheckpoint(0, p.writer.nextSeq, () => p.writer.syncActive());
  } catch (e) {
    // Void REDRIVE records (moves that never happened) must not outlive this open: once a new
    // item took their seq they would look done. Without room for a checkpoint that drops them,
    // the open fails (ERR_STORE_FULL) and changes nothing more.
    if (!isStoreFull(e) || plan.cursor === null || plan.voidRedrives > 0) throw e;
    await p.cursor.reuse(plan.cursor);
  }
}

/** Keep the torn bytes in a side file (fsynced), then cut them and make the cut durable. */
async function cutTail(p: RecoveryParts, path: string, validEnd: number, zero: boolean, tally: CutTally): Promise<void> {
  const { fs } = p;
  const fd = fs.open(path, 'readWrite');
  try {
    const size = fs.size(fd);
    if (size <= validEnd) return;
    if (zero) tally.zeroTailBytes += size - validEnd;
    else {
      tally.tornBytes += size - validEnd;
      const kept = new Uint8Array(Math.min(size - validEnd, 64 * 1024 * 1024));
      const n = readFully(fs, fd, kept, 0, kept.length, validEnd);
      const side = `${path}${TORN_INFIX}${validEnd}`;
      if (fs.stat(side) !== null) fs.unlink(side);
      const sfd = fs.open(side, 'create', p.opts.fileMode);
      try {
        fs.write(sfd, kept, 0, n, 0);
        await fs.fsync(sfd);
      } finally {
        closeQuietly(fs, sfd);
      }
      tally.tornFiles.push(side);
    }
    fs.truncate(fd, validEnd);
    await fs.fdatasync(fd);
  } finally {
    closeQuietly(fs, fd);
  }
}
