/**
 * CrashFileSystem: an in-memory {@link FileSystem} that simulates power loss, process death and
 * device errors, for LogStore's crash tests and for users who property-test their own crash
 * recovery (`persistent-queue/testing`).
 *
 * Fault model (docs/internals/fault-model.md, "Fault model and how it is tested") — what this disk
 * injects:
 * - F1 bytes written after a file's last successful fsync/fdatasync may be lost;
 * - F2 any prefix of a file's unsynced writes may survive, the last surviving one torn at any
 *   byte (a torn write keeps a prefix of its bytes);
 * - F3 a file may come back longer than its synced length, the extra bytes zero (the size reached
 *   the journal, the data blocks did not);
 * - F4 create, rename, unlink and mkdir are lost unless their directory was fsynced with
 *   `fsyncDir` afterwards; fsync of a file does NOT make its directory entry durable (ext4
 *   semantics, ALICE; LevelDB #196);
 * - F5 after a failed fsync/fdatasync (EIO) the data it covered is in an unknown state: each of
 *   those writes independently survives, is lost or is torn, and a later successful fsync does
 *   not make it durable (fsyncgate). Reads by the live process still see what was written
 *   (ext4 keeps the pages, marked clean);
 * - detect-only: bit flips in stored data ({@link CrashFileSystem.flipBit});
 * - device errors on demand: EIO on any sync, ENOSPC once a byte budget is exceeded (a partial
 *   write lands first), and any errno (EMFILE on open, EAGAIN/EIO on read...) by rule.
 *
 * Out of scope: misdirected writes, deliberate tampering, torn writes that keep anything but a
 * prefix (sector reordering inside one write), corruption of directory structure beyond lost
 * entries, cross-file write ordering guarantees that real journals give (we assume none, which is
 * stricter), fd limits other than by rule, permissions (modes are stored, never enforced),
 * symlinks and hard links.
 *
 * How it works. The disk keeps one pristine tree of inodes (directories map names to inode
 * numbers, so an open fd keeps an unlinked file alive and rename/unlink behave as on POSIX),
 * the tree as it was when this disk instance started (`base`, fully durable), and an ordered
 * I/O trace of every mutating call since then (write, truncate, create, mkdir, rename, unlink,
 * fsync, fdatasync, fsyncDir, syncAll). Each trace entry knows the trace index of the sync that
 * made it durable, if any. A crash state is computed by replaying the trace over a copy of
 * `base`, keeping, dropping or tearing each unsynced entry. Faults are held beside the contents
 * (bit flips are an overlay applied on read, rules and the space budget are checked at the call),
 * so the same run can be replayed with faults off ({@link CrashFileSystem.setFaultsEnabled}).
 * Memory is O(bytes written since this disk instance started): the trace keeps every write's
 * bytes. Every crash starts a new disk with an empty trace.
 *
 * Crashes:
 * - {@link CrashFileSystem.crash} — power loss with every choice drawn from the seeded PRNG.
 * - {@link CrashFileSystem.crashAt} — one exact crash state, named by a {@link CrashPoint}.
 * - {@link CrashFileSystem.crashPoints} — enumerates crash points for exhaustive tests.
 * - {@link CrashFileSystem.processCrash} — the process dies, the OS survives.
 * Each returns a NEW instance; the original is never reset. `crash()` and `processCrash()` also
 * kill the handle they are called on (every later call on it throws `ECRASHED`, in-flight syncs
 * never settle), the way a dead process can do nothing more; `crashAt()` leaves it alive so one
 * recorded run can be crashed at every point.
 *
 * Reproduction. Every random choice comes from the seed given to the first instance (children
 * derive theirs from it). `reproLine()` returns `seed=0x0000002a crash=r1>12/11/5z`: the root
 * seed and the crash history (`r<n>` a random crash, `p` a process crash, `<at>/<keep>/<torn>[z]`
 * a {@link CrashPoint}). Wrap a seeded test body in `withReproduction(() => fs.reproLine(), ...)`
 * (./prng.ts) and a failure prints that line; rerun with `SEED=0x0000002a`.
 */

import { posix } from 'node:path';
import type { FileStat, FileSystem, LockHandle, OpenMode } from '../fs/file-system.js';
import { expectation, nonNegativeInteger } from '../lib/validate.js';
import { Prng, formatSeed } from './prng.js';

// ---------------------------------------------------------------------------------------------
// Errors

/** Linux errno numbers (Node reports them negated in `errno`), for the codes this disk throws. */
const ERRNO = {
  ENOENT: 2,
  EIO: 5,
  EBADF: 9,
  EAGAIN: 11,
  EACCES: 13,
  EEXIST: 17,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  ENFILE: 23,
  EMFILE: 24,
  ENOSPC: 28,
  EROFS: 30,
  ENOTEMPTY: 39,
} as const;

const DESCRIPTION: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EIO: 'i/o error',
  EBADF: 'bad file descriptor',
  EAGAIN: 'resource temporarily unavailable',
  EACCES: 'permission denied',
  EEXIST: 'file already exists',
  ENOTDIR: 'not a directory',
  EISDIR: 'illegal operation on a directory',
  EINVAL: 'invalid argument',
  ENFILE: 'file table overflow',
  EMFILE: 'too many open files',
  ENOSPC: 'no space left on device',
  EROFS: 'read-only file system',
  ENOTEMPTY: 'directory not empty',
};

/** An errno code this disk can throw or inject. */
export type ErrnoCode = keyof typeof ERRNO;

/** A Node-style system error: what `node:fs` throws. */
export interface CrashFsError extends Error {
  readonly code: string;
  readonly errno: number;
  readonly syscall: string;
  readonly path?: string;
}

function systemError(code: ErrnoCode, syscall: string, path?: string): CrashFsError {
  const where = path === undefined ? '' : ` '${path}'`;
  const error = new Error(`${code}: ${DESCRIPTION[code]}, ${syscall}${where}`) as Error & Record<string, unknown>;
  error.code = code;
  error.errno = -ERRNO[code];
  error.syscall = syscall;
  if (path !== undefined) error.path = path;
  return error as unknown as CrashFsError;
}

function crashedError(syscall: string): Error {
  const error = new Error(
    `ECRASHED: this CrashFileSystem handle belongs to a process that crashed (${syscall}); use the instance crash() or processCrash() returned`,
  ) as Error & Record<string, unknown>;
  error.code = 'ECRASHED';
  error.syscall = syscall;
  return error;
}

// ---------------------------------------------------------------------------------------------
// The tree of inodes

type NodeId = number;
const ROOT: NodeId = 1;
const DEFAULT_FILE_MODE = 0o666;
const DEFAULT_DIR_MODE = 0o777;

interface FileNode {
  readonly kind: 'file';
  /** Capacity buffer; only `[0, size)` is the file. Bytes past `size` are always zero. */
  data: Uint8Array;
  size: number;
  mode: number;
}

interface DirNode {
  readonly kind: 'dir';
  entries: Map<string, NodeId>;
  mode: number;
}

type Inode = FileNode | DirNode;

class Tree {
  readonly nodes = new Map<NodeId, Inode>();

  static empty(): Tree {
    const tree = new Tree();
    tree.nodes.set(ROOT, { kind: 'dir', entries: new Map(), mode: DEFAULT_DIR_MODE });
    return tree;
  }

  clone(): Tree {
    const copy = new Tree();
    for (const [id, node] of this.nodes) {
      if (node.kind === 'file') copy.nodes.set(id, { kind: 'file', data: node.data.slice(0, node.size), size: node.size, mode: node.mode });
      else copy.nodes.set(id, { kind: 'dir', entries: new Map(node.entries), mode: node.mode });
    }
    return copy;
  }

  file(id: NodeId, mode = DEFAULT_FILE_MODE): FileNode {
    let node = this.nodes.get(id);
    if (node === undefined) {
      // Replay only: the create that named this inode was lost, but data synced to it was not.
      node = { kind: 'file', data: new Uint8Array(0), size: 0, mode };
      this.nodes.set(id, node);
    }
    if (node.kind !== 'file') throw new Error(`crash-fs invariant: inode ${id} is not a file`);
    return node;
  }

  dir(id: NodeId, mode = DEFAULT_DIR_MODE): DirNode {
    let node = this.nodes.get(id);
    if (node === undefined) {
      node = { kind: 'dir', entries: new Map(), mode };
      this.nodes.set(id, node);
    }
    if (node.kind !== 'dir') throw new Error(`crash-fs invariant: inode ${id} is not a directory`);
    return node;
  }

  /** Drops every inode not reachable from the root: what a file system check does after a crash. */
  prune(): void {
    const reachable = new Set<NodeId>([ROOT]);
    const stack: NodeId[] = [ROOT];
    while (stack.length > 0) {
      const node = this.nodes.get(stack.pop()!);
      if (node === undefined || node.kind !== 'dir') continue;
      for (const [name, child] of node.entries) {
        if (!this.nodes.has(child)) {
          // The entry survived but its inode never existed on disk (created and linked only in
          // lost operations): the entry is dropped as fsck would.
          node.entries.delete(name);
          continue;
        }
        if (!reachable.has(child)) {
          reachable.add(child);
          stack.push(child);
        }
      }
    }
    for (const id of [...this.nodes.keys()]) if (!reachable.has(id)) this.nodes.delete(id);
  }

  /** Every path in the tree with its inode, directories before their contents, names sorted. */
  *walk(): Generator<[path: string, id: NodeId, node: Inode]> {
    const stack: [string, NodeId][] = [['/', ROOT]];
    while (stack.length > 0) {
      const [path, id] = stack.pop()!;
      const node = this.nodes.get(id);
      if (node === undefined) continue;
      yield [path, id, node];
      if (node.kind === 'dir') {
        const names = [...node.entries.keys()].sort().reverse();
        for (const name of names) stack.push([path === '/' ? `/${name}` : `${path}/${name}`, node.entries.get(name)!]);
      }
    }
  }
}

function setFileSize(file: FileNode, size: number): void {
  if (size > file.data.length) {
    const grown = new Uint8Array(Math.max(size, file.data.length * 2, 64));
    grown.set(file.data.subarray(0, file.size));
    file.data = grown;
  } else if (size < file.size) {
    file.data.fill(0, size, file.size);
  }
  file.size = size;
}

function writeInto(file: FileNode, position: number, bytes: Uint8Array): void {
  const end = position + bytes.length;
  if (end > file.size) setFileSize(file, end);
  file.data.set(bytes, position);
}

// ---------------------------------------------------------------------------------------------
// The I/O trace

type Op =
  | { readonly kind: 'write'; readonly node: NodeId; readonly position: number; readonly bytes: Uint8Array; readonly sizeBefore: number }
  | { readonly kind: 'truncate'; readonly node: NodeId; readonly length: number }
  | {
      readonly kind: 'create';
      readonly dir: NodeId;
      readonly name: string;
      readonly node: NodeId;
      readonly type: 'file' | 'dir';
      readonly mode: number;
    }
  /** The destination half of a cross-directory rename. */
  | {
      readonly kind: 'link';
      readonly dir: NodeId;
      readonly name: string;
      readonly node: NodeId;
      readonly type: 'file' | 'dir';
      readonly mode: number;
    }
  | { readonly kind: 'unlink'; readonly dir: NodeId; readonly name: string }
  | { readonly kind: 'rename'; readonly dir: NodeId; readonly from: string; readonly to: string }
  | { readonly kind: 'fsync' | 'fdatasync'; readonly node: NodeId; readonly ok: boolean }
  | { readonly kind: 'fsyncDir'; readonly dir: NodeId; readonly ok: boolean }
  | { readonly kind: 'syncAll' };

interface Entry {
  readonly index: number;
  readonly op: Op;
  /** Path(s) the call named, for printing. */
  readonly path: string;
  readonly toPath?: string;
  /** Trace index of the successful sync that made this entry durable; Infinity while it is not. */
  durableAt: number;
  /** Covered by a failed sync (F5): never made durable by a later sync. */
  uncertain: boolean;
}

function isSync(op: Op): boolean {
  return op.kind === 'fsync' || op.kind === 'fdatasync' || op.kind === 'fsyncDir' || op.kind === 'syncAll';
}

/** The inode whose sync makes an entry durable: the file for data, the directory for entries. */
function ownerOf(op: Op): NodeId {
  switch (op.kind) {
    case 'write':
    case 'truncate':
      return op.node;
    case 'create':
    case 'link':
    case 'unlink':
    case 'rename':
      return op.dir;
    default:
      throw new Error(`crash-fs invariant: ${op.kind} has no owner`);
  }
}

/** What replay does with one unsynced entry. */
type Decision = 'keep' | 'drop' | { readonly tornBytes: number; readonly zeroTail: boolean };

function applyOp(tree: Tree, op: Op, decision: Decision): void {
  if (decision === 'drop') return;
  switch (op.kind) {
    case 'write': {
      const file = tree.file(op.node);
      if (decision === 'keep') {
        writeInto(file, op.position, op.bytes);
      } else {
        if (decision.tornBytes > 0) writeInto(file, op.position, op.bytes.subarray(0, decision.tornBytes));
        // F3: the new size reached the disk, the data did not; the gap reads as zeros.
        if (decision.zeroTail && op.position + op.bytes.length > file.size) setFileSize(file, op.position + op.bytes.length);
      }
      return;
    }
    case 'truncate':
      setFileSize(tree.file(op.node), op.length);
      return;
    case 'create':
    case 'link': {
      if (op.type === 'file') tree.file(op.node, op.mode);
      else tree.dir(op.node, op.mode);
      tree.dir(op.dir).entries.set(op.name, op.node);
      return;
    }
    case 'unlink':
      tree.dir(op.dir).entries.delete(op.name);
      return;
    case 'rename': {
      const entries = tree.dir(op.dir).entries;
      const id = entries.get(op.from);
      // The entry may be missing when the create that made it was lost in this crash state.
      if (id === undefined) return;
      entries.delete(op.from);
      entries.set(op.to, id);
      return;
    }
    default:
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Public types

/**
 * One exact crash state of a recorded trace, for exhaustive enumeration.
 *
 * Power is lost after the first `at` trace entries completed. Entries made durable by a sync
 * among those `at` entries survive. Of the others (unsynced as of `at`, including entries a
 * failed sync left uncertain), the disk had written back those with index `< keep` in full; the
 * entry `keep` itself, if it is a write, landed `tornBytes` bytes (and, with `zeroTail`, the file
 * size grew to cover the whole write, the missing bytes reading as zeros: F3); every later
 * unsynced entry is lost.
 *
 * `{ at: n, keep: n }` is "everything issued before the crash reached the disk";
 * `{ at: n, keep: 0 }` is "only what was synced survives" (F1 at its worst).
 * Printed as `at/keep/tornBytes` with a `z` suffix for `zeroTail`: `12/11/5z`.
 */
export interface CrashPoint {
  /** How many trace entries completed before power was lost; in [traceStart, traceLength]. */
  readonly at: number;
  /** Unsynced entries with index below this reached the disk; in [traceStart, at]. */
  readonly keep: number;
  /** Bytes of unsynced write `keep` that landed. @default 0 */
  readonly tornBytes?: number;
  /** The torn write's file size landed, its missing bytes as zeros (F3). @default false */
  readonly zeroTail?: boolean;
}

/** Formats a crash point as it appears in a reproduction line: `at/keep/torn[z]`. */
export function formatCrashPoint(point: CrashPoint): string {
  return `${point.at}/${point.keep}/${point.tornBytes ?? 0}${point.zeroTail === true ? 'z' : ''}`;
}

/** Parses {@link formatCrashPoint}'s output. */
export function parseCrashPoint(text: string): CrashPoint {
  const match = /^(\d+)\/(\d+)\/(\d+)(z?)$/.exec(text.trim());
  if (match === null) throw new RangeError(expectation('point', 'a crash point like `12/11/5z`', text));
  return { at: Number(match[1]), keep: Number(match[2]), tornBytes: Number(match[3]), zeroTail: match[4] === 'z' };
}

/** Options of {@link CrashFileSystem.crashPoints}. */
export interface CrashPointsOptions {
  /** First crash point; use `fs.traceLength` after setup to skip the setup's crash points. @default traceStart */
  readonly from?: number;
  /** Last crash point (inclusive). @default traceLength */
  readonly to?: number;
  /**
   * Which unsynced entries may be cut at each crash point.
   * - `'last'`: only the last completed entry may be lost or torn; everything before it reached
   *   the disk. This is "every crash point of the trace and every torn length of the last write".
   * - `'any'`: the disk may have written back any prefix of the unsynced entries, the entry at
   *   the cut torn (F1 + F2 over the whole trace; quadratic in the trace length).
   * @default 'last'
   */
  readonly writeback?: 'last' | 'any';
  /**
   * Torn lengths to try for a cut write of `length` bytes; values outside [1, length) are ignored.
   * For big writes pick a few: `(n) => [1, n >> 1, n - 1]`, or sector boundaries.
   * @default every length in [1, length)
   */
  readonly tornLengths?: (length: number) => Iterable<number>;
  /** Also yield, for each cut write that extended its file, the zero-tail variant (F3) of each torn length, 0 included. @default false */
  readonly zeroTail?: boolean;
}

/** Options of {@link CrashFileSystem.crash}. */
export interface CrashOptions {
  /**
   * What happens to unsynced data.
   * - `'random'`: per file, any prefix of its unsynced writes survives, the last one maybe torn,
   *   maybe a zero tail; per directory, any prefix of its unsynced entry changes survives; each
   *   write a failed sync covered survives, is lost or is torn independently (F1–F5).
   * - `'lose'`: only synced data and fsynced directory entries survive.
   * - `'keep'`: everything written survives (a perfect disk; still releases locks and fds).
   * @default 'random'
   */
  readonly unsynced?: 'random' | 'keep' | 'lose';
  /** Seed for this crash's choices. @default drawn from this disk's PRNG */
  readonly seed?: number;
  /** Kill this handle (every later call throws `ECRASHED`). @default true */
  readonly kill?: boolean;
}

/** A mutating call, as recorded in the I/O trace. */
export interface TraceEntry {
  /** Absolute index in the trace; crash points count entries with these indices. */
  readonly index: number;
  readonly kind: 'write' | 'truncate' | 'create' | 'mkdir' | 'link' | 'unlink' | 'rename' | 'fsync' | 'fdatasync' | 'fsyncDir' | 'syncAll';
  /** The path the call named (for `rename`, the source). */
  readonly path: string;
  /** For `rename`: the destination. */
  readonly to?: string;
  /** For `write`: byte offset. */
  readonly position?: number;
  /** For `write`: bytes written (the landed part of a partial ENOSPC write); for `truncate`: the new length. */
  readonly length?: number;
  /** For syncs: whether it succeeded. */
  readonly ok?: boolean;
  /** Index of the sync that made this entry durable, or `null` (not yet, or uncertain after a failed sync). */
  readonly durableAt: number | null;
}

/** Calls that fault rules can target. */
export type FaultOp =
  | 'open'
  | 'close'
  | 'read'
  | 'write'
  | 'size'
  | 'truncate'
  | 'fsync'
  | 'fdatasync'
  | 'fsyncDir'
  | 'rename'
  | 'unlink'
  | 'mkdirp'
  | 'readdir'
  | 'stat'
  | 'lock';

/** A call as a fault rule's predicate sees it. */
export interface FaultCall {
  readonly op: FaultOp;
  readonly path: string;
  /** For `open`. */
  readonly mode?: OpenMode;
  /** For `read`/`write`: byte offset. */
  readonly position?: number;
  /** For `read`/`write`: byte count; for `truncate`: the new length. */
  readonly length?: number;
  /** 1-based count of calls of this `op` on this disk, this one included. */
  readonly callIndex: number;
}

/**
 * A fault to inject: calls of `op` that pass `when` are counted, and the `nth` of them and the
 * following ones fail with `code`, `times` times in all. The failing call has no effect, except a
 * failed fsync/fdatasync, which leaves the data it covered uncertain (F5).
 *
 * @example fs.inject({ op: 'fdatasync', code: 'EIO', nth: 3 })            // 3rd fdatasync fails
 * @example fs.inject({ op: 'open', code: 'EMFILE', times: Infinity })      // until removed
 * @example fs.inject({ op: 'read', code: 'EAGAIN', when: (c) => c.path.endsWith('.seg') })
 */
export interface FaultRule {
  readonly op: FaultOp | readonly FaultOp[];
  readonly code: ErrnoCode;
  /** Which matching call fails first, 1-based. @default 1 */
  readonly nth?: number;
  /** How many matching calls fail, starting with the `nth`. @default 1 */
  readonly times?: number;
  /** Only calls for which this returns true are counted. @default every call */
  readonly when?: (call: FaultCall) => boolean;
}

/** An injected fault; `remove()` is idempotent. */
export interface FaultHandle {
  /** How many calls this rule has failed so far. */
  readonly firedCount: number;
  remove(): void;
}

/** Counters of what the disk did (cumulative for this disk instance, across process crashes). */
export interface CrashFsStats {
  readonly openCount: number;
  readonly readCount: number;
  readonly readBytes: number;
  readonly writeCount: number;
  readonly writtenBytes: number;
  readonly truncateCount: number;
  readonly fsyncCount: number;
  readonly fdatasyncCount: number;
  readonly fsyncDirCount: number;
  readonly syncFailureCount: number;
  readonly injectedFaultCount: number;
}

/** Options of the {@link CrashFileSystem} constructor. */
export interface CrashFileSystemOptions {
  /** Seed of every random choice this disk and its crash descendants make. @default 1 */
  readonly seed?: number;
  /** Space budget in bytes (sum of file sizes); writes beyond it fail with ENOSPC. @default Infinity */
  readonly diskBytesMax?: number;
}

// ---------------------------------------------------------------------------------------------
// The disk: state shared by every process handle on it

/** What the disk may do to a process handle; kept off the public class. */
interface HandleHooks {
  openNodes(): NodeId[];
  die(): void;
}

interface Rule {
  readonly ops: ReadonlySet<FaultOp>;
  readonly code: ErrnoCode;
  readonly nth: number;
  readonly times: number;
  readonly when: ((call: FaultCall) => boolean) | undefined;
  matched: number;
  fired: number;
  removed: boolean;
}

type Counters = {
  -readonly [K in keyof CrashFsStats]: CrashFsStats[K];
};

class Disk {
  readonly base: Tree;
  readonly live: Tree;
  readonly trace: Entry[] = [];
  readonly traceStart: number;
  readonly prng: Prng;
  readonly rootSeed: number;
  readonly history: readonly string[];
  nextNode: NodeId;
  /** Unsynced, not uncertain, entries per owner inode. */
  readonly unsynced = new Map<NodeId, Entry[]>();
  /** Bit flips: inode → byte offset → XOR mask. An overlay; the contents stay pristine. */
  readonly flips: Map<NodeId, Map<number, number>>;
  /** Lock path → the handle holding it. */
  readonly locks = new Map<string, HandleHooks>();
  readonly handles = new Set<HandleHooks>();
  readonly rules: Rule[] = [];
  readonly callCounts = new Map<FaultOp, number>();
  diskBytesMax: number;
  faultsEnabled = true;
  readonly counters: Counters = {
    openCount: 0,
    readCount: 0,
    readBytes: 0,
    writeCount: 0,
    writtenBytes: 0,
    truncateCount: 0,
    fsyncCount: 0,
    fdatasyncCount: 0,
    fsyncDirCount: 0,
    syncFailureCount: 0,
    injectedFaultCount: 0,
  };

  constructor(options: {
    base: Tree;
    seed: number;
    rootSeed: number;
    history: readonly string[];
    flips: Map<NodeId, Map<number, number>>;
    diskBytesMax: number;
  }) {
    this.base = options.base;
    this.live = options.base.clone();
    this.prng = new Prng(options.seed);
    this.rootSeed = options.rootSeed;
    this.history = options.history;
    this.flips = options.flips;
    this.diskBytesMax = options.diskBytesMax;
    this.traceStart = 0;
    let max = ROOT;
    for (const id of this.base.nodes.keys()) max = Math.max(max, id);
    this.nextNode = max + 1;
  }

  get traceLength(): number {
    return this.traceStart + this.trace.length;
  }

  entry(index: number): Entry {
    return this.trace[index - this.traceStart]!;
  }

  /** Records a mutating call and applies it to the live tree. */
  record(op: Op, path: string, toPath?: string): Entry {
    const entry: Entry = {
      index: this.traceLength,
      op,
      path,
      ...(toPath === undefined ? {} : { toPath }),
      durableAt: Infinity,
      uncertain: false,
    };
    this.trace.push(entry);
    if (isSync(op)) {
      entry.durableAt = entry.index;
      this.settle(op, entry.index);
    } else {
      const owner = ownerOf(op);
      let list = this.unsynced.get(owner);
      if (list === undefined) this.unsynced.set(owner, (list = []));
      list.push(entry);
      applyOp(this.live, op, 'keep');
    }
    return entry;
  }

  private settle(op: Op, index: number): void {
    if (op.kind === 'syncAll') {
      for (const list of this.unsynced.values()) for (const entry of list) entry.durableAt = index;
      this.unsynced.clear();
      return;
    }
    if (op.kind !== 'fsync' && op.kind !== 'fdatasync' && op.kind !== 'fsyncDir') return;
    const owner = op.kind === 'fsyncDir' ? op.dir : op.node;
    const list = this.unsynced.get(owner);
    if (list === undefined) return;
    if (op.ok) {
      for (const entry of list) entry.durableAt = index;
      this.unsynced.delete(owner);
    } else if (op.kind !== 'fsyncDir') {
      // F5 (fsyncgate): after EIO the kernel forgets the dirty state; a later fsync succeeds
      // without writing these pages again, so they are never made durable.
      for (const entry of list) entry.uncertain = true;
      this.unsynced.delete(owner);
    }
    // A failed directory fsync leaves its entries pending: a later fsyncDir may still commit them.
  }

  /** Replays `[traceStart, at)` over a copy of `base`. */
  replay(at: number, decide: (entry: Entry) => Decision): Tree {
    const tree = this.base.clone();
    for (let index = this.traceStart; index < at; index++) {
      const entry = this.entry(index);
      if (isSync(entry.op)) continue;
      applyOp(tree, entry.op, decide(entry));
    }
    return tree;
  }

  /** Counts a call against the fault rules and throws the first rule that fires. */
  check(call: Omit<FaultCall, 'callIndex'>): void {
    const callIndex = (this.callCounts.get(call.op) ?? 0) + 1;
    this.callCounts.set(call.op, callIndex);
    if (!this.faultsEnabled || this.rules.length === 0) return;
    const full: FaultCall = { ...call, callIndex };
    for (const rule of this.rules) {
      if (rule.removed || !rule.ops.has(call.op) || rule.fired >= rule.times) continue;
      if (rule.when !== undefined && !rule.when(full)) continue;
      rule.matched++;
      if (rule.matched >= rule.nth) {
        rule.fired++;
        this.counters.injectedFaultCount++;
        throw systemError(rule.code, call.op, call.path);
      }
    }
  }

  /** Sum of the sizes of live files: reachable ones and unlinked ones still open. */
  usedBytes(): number {
    const counted = new Set<NodeId>();
    let total = 0;
    for (const [, id, node] of this.live.walk()) {
      if (node.kind === 'file' && !counted.has(id)) {
        counted.add(id);
        total += node.size;
      }
    }
    for (const handle of this.handles) {
      for (const id of handle.openNodes()) {
        const node = this.live.nodes.get(id);
        if (node !== undefined && node.kind === 'file' && !counted.has(id)) {
          counted.add(id);
          total += node.size;
        }
      }
    }
    return total;
  }

  /** Applies the bit-flip overlay of `node` to bytes read from `[position, position + out.length)`. */
  overlay(node: NodeId, position: number, out: Uint8Array): void {
    if (!this.faultsEnabled) return;
    const flips = this.flips.get(node);
    if (flips === undefined) return;
    for (const [offset, mask] of flips) {
      if (offset >= position && offset < position + out.length) out[offset - position]! ^= mask;
    }
  }

  clearFlips(node: NodeId, from: number, to: number): void {
    const flips = this.flips.get(node);
    if (flips === undefined) return;
    for (const offset of [...flips.keys()]) if (offset >= from && offset < to) flips.delete(offset);
    if (flips.size === 0) this.flips.delete(node);
  }

  /** A new disk whose durable content is `tree`, as found after a power loss. */
  successor(tree: Tree, label: string): Disk {
    tree.prune();
    const flips = new Map<NodeId, Map<number, number>>();
    for (const [id, map] of this.flips) {
      const node = tree.nodes.get(id);
      if (node === undefined || node.kind !== 'file') continue;
      const kept = new Map([...map].filter(([offset]) => offset < node.size));
      if (kept.size > 0) flips.set(id, kept);
    }
    return new Disk({
      base: tree,
      seed: this.prng.next(),
      rootSeed: this.rootSeed,
      history: [...this.history, label],
      flips,
      diskBytesMax: this.diskBytesMax,
    });
  }

  /** Power loss: every process on this disk dies. */
  kill(): void {
    for (const handle of [...this.handles]) handle.die();
  }
}

// ---------------------------------------------------------------------------------------------
// The public file system: one process's handle on a disk

interface OpenFile {
  readonly node: NodeId;
  readonly path: string;
  readonly writable: boolean;
}

interface Resolved {
  readonly parentId: NodeId;
  readonly parent: DirNode;
  readonly name: string;
  readonly id: NodeId | undefined;
}

const FD_FIRST = 3;

/** Set just before constructing a handle on an existing disk; the constructor takes it. */
let adoptedDisk: Disk | undefined;

function handleOn(disk: Disk): CrashFileSystem {
  adoptedDisk = disk;
  try {
    return new CrashFileSystem();
  } finally {
    adoptedDisk = undefined;
  }
}

/**
 * The simulated crash disk. See the module comment for the fault model and crash API.
 *
 * @example
 * const fs = new CrashFileSystem({ seed });
 * await runWorkload(fs);
 * const after = fs.crash();                  // power loss, choices from the seed
 * await recover(after);                      // on failure print after.reproLine()
 */
export class CrashFileSystem implements FileSystem {
  readonly #disk: Disk;
  readonly #fds = new Map<number, OpenFile>();
  #nextFd = FD_FIRST;
  #alive = true;
  #syncsPaused = false;
  #pausedSyncs: (() => void)[] = [];
  readonly #locks = new Set<string>();

  readonly #hooks: HandleHooks;

  constructor(options: CrashFileSystemOptions = {}) {
    const disk = adoptedDisk;
    adoptedDisk = undefined;
    if (disk !== undefined) {
      this.#disk = disk;
    } else {
      if (options === null || typeof options !== 'object') throw new TypeError(expectation('options', 'an object', options));
      const seed = options.seed ?? 1;
      if (!Number.isSafeInteger(seed)) throw new TypeError(expectation('seed', 'a safe integer', seed));
      const diskBytesMax = options.diskBytesMax ?? Infinity;
      checkBudget(diskBytesMax);
      this.#disk = new Disk({ base: Tree.empty(), seed, rootSeed: seed >>> 0, history: [], flips: new Map(), diskBytesMax });
    }
    this.#hooks = {
      openNodes: () => [...this.#fds.values()].map((file) => file.node),
      die: () => this.#die(),
    };
    this.#disk.handles.add(this.#hooks);
  }

  // -------------------------------------------------------------------------------------------
  // Identity and reproduction

  /** The seed of the first disk of this lineage: the one a reproduction needs. */
  get seed(): number {
    return this.#disk.rootSeed;
  }

  /** Crashes that led to this disk, oldest first: `r<n>` random, `p` process, `at/keep/torn[z]` a crash point. */
  get crashHistory(): readonly string[] {
    return this.#disk.history;
  }

  /** The one line that reproduces this state: `seed=0x0000002a crash=r1>12/11/5z` (`crash=none` before any). */
  reproLine(): string {
    const history = this.#disk.history;
    return `seed=${formatSeed(this.#disk.rootSeed)} crash=${history.length === 0 ? 'none' : history.join('>')}`;
  }

  /** False once this handle's process crashed; every call then throws `ECRASHED`. */
  get alive(): boolean {
    return this.#alive;
  }

  // -------------------------------------------------------------------------------------------
  // FileSystem

  mkdirp(path: string, mode: number): void {
    this.#live('mkdirp');
    const full = absolute(path);
    nonNegativeInteger('mode', mode);
    this.#disk.check({ op: 'mkdirp', path: full });
    let id = ROOT;
    let current = '';
    for (const name of components(full)) {
      current += `/${name}`;
      const dir = this.#dirNode(id, 'mkdir', current);
      const child = dir.entries.get(name);
      if (child === undefined) {
        const node = this.#disk.nextNode++;
        this.#disk.record({ kind: 'create', dir: id, name, node, type: 'dir', mode }, current);
        id = node;
      } else {
        if (this.#disk.live.nodes.get(child)!.kind !== 'dir') throw systemError(current === full ? 'EEXIST' : 'ENOTDIR', 'mkdir', full);
        id = child;
      }
    }
  }

  readdir(path: string): string[] {
    this.#live('readdir');
    const full = absolute(path);
    this.#disk.check({ op: 'readdir', path: full });
    const { id } = this.#resolve(full, 'scandir');
    if (id === undefined) throw systemError('ENOENT', 'scandir', full);
    return [...this.#dirNode(id, 'scandir', full).entries.keys()].sort();
  }

  stat(path: string): FileStat | null {
    this.#live('stat');
    const full = absolute(path);
    this.#disk.check({ op: 'stat', path: full });
    let resolved: Resolved;
    try {
      resolved = this.#resolve(full, 'stat');
    } catch (error) {
      if ((error as CrashFsError).code === 'ENOENT' || (error as CrashFsError).code === 'ENOTDIR') return null;
      throw error;
    }
    if (resolved.id === undefined) return null;
    const node = this.#disk.live.nodes.get(resolved.id)!;
    return { size: node.kind === 'file' ? node.size : 0, isFile: node.kind === 'file', isDirectory: node.kind === 'dir' };
  }

  open(path: string, mode: OpenMode, fileMode: number = DEFAULT_FILE_MODE): number {
    this.#live('open');
    const full = absolute(path);
    if (mode !== 'read' && mode !== 'readWrite' && mode !== 'create') {
      throw new TypeError(expectation('mode', "'read', 'readWrite' or 'create'", mode));
    }
    this.#disk.check({ op: 'open', path: full, mode });
    const { parentId, name, id } = this.#resolve(full, 'open');
    let node: NodeId;
    if (mode === 'create') {
      if (id !== undefined) throw systemError('EEXIST', 'open', full);
      node = this.#disk.nextNode++;
      this.#disk.record({ kind: 'create', dir: parentId, name, node, type: 'file', mode: fileMode }, full);
    } else {
      if (id === undefined) throw systemError('ENOENT', 'open', full);
      if (this.#disk.live.nodes.get(id)!.kind !== 'file') throw systemError('EISDIR', 'open', full);
      node = id;
    }
    this.#disk.counters.openCount++;
    const fd = this.#nextFd++;
    this.#fds.set(fd, { node, path: full, writable: mode !== 'read' });
    return fd;
  }

  close(fd: number): void {
    this.#live('close');
    const file = this.#fd(fd, 'close');
    this.#disk.check({ op: 'close', path: file.path });
    this.#fds.delete(fd);
  }

  read(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): number {
    this.#live('read');
    const file = this.#fd(fd, 'read');
    checkRange(buffer, offset, length, position);
    this.#disk.check({ op: 'read', path: file.path, position, length });
    const node = this.#disk.live.file(file.node);
    const count = Math.max(0, Math.min(length, node.size - position));
    const out = buffer.subarray(offset, offset + count);
    out.set(node.data.subarray(position, position + count));
    this.#disk.overlay(file.node, position, out);
    this.#disk.counters.readCount++;
    this.#disk.counters.readBytes += count;
    return count;
  }

  write(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): void {
    this.#live('write');
    const file = this.#fd(fd, 'write');
    checkRange(buffer, offset, length, position);
    if (!file.writable) throw systemError('EBADF', 'write', file.path);
    this.#disk.check({ op: 'write', path: file.path, position, length });
    const disk = this.#disk;
    const node = disk.live.file(file.node);
    let landed = length;
    if (disk.faultsEnabled && disk.diskBytesMax !== Infinity && position + length > node.size) {
      // A full disk takes the bytes that fit, then fails, as write(2) returns short then ENOSPC.
      const freeBytes = Math.max(0, disk.diskBytesMax - disk.usedBytes());
      const endMax = node.size + freeBytes;
      landed = Math.max(0, Math.min(length, endMax - position));
    }
    if (landed > 0) {
      // A copy, never a view: `Buffer.prototype.slice` returns a view, and the caller may reuse its buffer.
      const bytes = new Uint8Array(buffer.subarray(offset, offset + landed));
      disk.record({ kind: 'write', node: file.node, position, bytes, sizeBefore: node.size }, file.path);
      disk.clearFlips(file.node, position, position + landed);
      disk.counters.writeCount++;
      disk.counters.writtenBytes += landed;
    }
    if (landed < length) throw systemError('ENOSPC', 'write', file.path);
  }

  size(fd: number): number {
    this.#live('size');
    const file = this.#fd(fd, 'fstat');
    this.#disk.check({ op: 'size', path: file.path });
    return this.#disk.live.file(file.node).size;
  }

  truncate(fd: number, length: number): void {
    this.#live('truncate');
    const file = this.#fd(fd, 'ftruncate');
    nonNegativeInteger('length', length);
    if (!file.writable) throw systemError('EINVAL', 'ftruncate', file.path);
    this.#disk.check({ op: 'truncate', path: file.path, length });
    // Extending is sparse (no ENOSPC), as on ext4.
    this.#disk.record({ kind: 'truncate', node: file.node, length }, file.path);
    this.#disk.clearFlips(file.node, length, Infinity);
    this.#disk.counters.truncateCount++;
  }

  fdatasync(fd: number): Promise<void> {
    return this.#syncFile(fd, 'fdatasync');
  }

  fsync(fd: number): Promise<void> {
    return this.#syncFile(fd, 'fsync');
  }

  /** fdatasync on the calling thread (LogStore's `blockingSync`): the same effect, settled before it returns; {@link pauseSyncs} does not hold it. */
  fdatasyncSync(fd: number): void {
    this.#syncFileNow(fd, 'fdatasync');
  }

  /** fsync on the calling thread (see {@link fdatasyncSync}). */
  fsyncSync(fd: number): void {
    this.#syncFileNow(fd, 'fsync');
  }

  fsyncDir(path: string): Promise<void> {
    return this.#deferred(() => {
      this.#live('fsyncDir');
      const full = absolute(path);
      const { id } = this.#resolve(full, 'fsync');
      if (id === undefined) throw systemError('ENOENT', 'open', full);
      this.#dirNode(id, 'fsync', full);
      this.#disk.counters.fsyncDirCount++;
      try {
        this.#disk.check({ op: 'fsyncDir', path: full });
      } catch (error) {
        this.#disk.counters.syncFailureCount++;
        this.#disk.record({ kind: 'fsyncDir', dir: id, ok: false }, full);
        throw error;
      }
      this.#disk.record({ kind: 'fsyncDir', dir: id, ok: true }, full);
    });
  }

  rename(from: string, to: string): void {
    this.#live('rename');
    const source = absolute(from);
    const target = absolute(to);
    this.#disk.check({ op: 'rename', path: source });
    const src = this.#resolve(source, 'rename');
    if (src.id === undefined) throw systemError('ENOENT', 'rename', source);
    const dst = this.#resolve(target, 'rename');
    if (source === target) return;
    const moving = this.#disk.live.nodes.get(src.id)!;
    if (dst.id !== undefined) {
      const replaced = this.#disk.live.nodes.get(dst.id)!;
      if (replaced.kind === 'dir' && moving.kind === 'file') throw systemError('EISDIR', 'rename', target);
      if (replaced.kind === 'file' && moving.kind === 'dir') throw systemError('ENOTDIR', 'rename', target);
      if (replaced.kind === 'dir' && replaced.entries.size > 0) throw systemError('ENOTEMPTY', 'rename', target);
    }
    if (moving.kind === 'dir' && (target + '/').startsWith(source + '/')) throw systemError('EINVAL', 'rename', target);
    if (src.parentId === dst.parentId) {
      this.#disk.record({ kind: 'rename', dir: src.parentId, from: src.name, to: dst.name }, source, target);
    } else {
      // Across directories the two entry changes are durable separately, each with its own
      // directory's fsync: a crash may show the file in both places or in neither.
      this.#disk.record({ kind: 'link', dir: dst.parentId, name: dst.name, node: src.id, type: moving.kind, mode: moving.mode }, target);
      this.#disk.record({ kind: 'unlink', dir: src.parentId, name: src.name }, source);
    }
  }

  unlink(path: string): void {
    this.#live('unlink');
    const full = absolute(path);
    this.#disk.check({ op: 'unlink', path: full });
    const { parentId, name, id } = this.#resolve(full, 'unlink');
    if (id === undefined) throw systemError('ENOENT', 'unlink', full);
    if (this.#disk.live.nodes.get(id)!.kind === 'dir') throw systemError('EISDIR', 'unlink', full);
    this.#disk.record({ kind: 'unlink', dir: parentId, name }, full);
  }

  /** The normalised absolute path of an existing entry (this disk has no symlinks). */
  realpath(path: string): string {
    this.#live('realpath');
    const full = absolute(path);
    if (this.#resolve(full, 'realpath').id === undefined) throw systemError('ENOENT', 'realpath', full);
    return full;
  }

  /**
   * An in-memory exclusive lock on `lockPath` (no file is created). Throws an error with
   * `code: 'ELOCKED'` while any handle on this disk holds it, this one included. Released by
   * `release()`, and by the holder's `crash()` or `processCrash()`.
   */
  lock(lockPath: string): LockHandle {
    this.#live('lock');
    const full = absolute(lockPath);
    this.#disk.check({ op: 'lock', path: full });
    if (this.#disk.locks.has(full)) {
      const error = new Error(`ELOCKED: lock is held, lock '${full}'`) as Error & Record<string, unknown>;
      error.code = 'ELOCKED';
      error.path = full;
      throw error;
    }
    this.#disk.locks.set(full, this.#hooks);
    this.#locks.add(full);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        if (this.#disk.locks.get(full) === this.#hooks) this.#disk.locks.delete(full);
        this.#locks.delete(full);
      },
    };
  }

  /** Whether a live handle on this disk holds the lock on `lockPath` (this one included); no pid is known here. */
  lockHolder(lockPath: string): { readonly pid: number | null } | null {
    this.#live('lockHolder');
    return this.#disk.locks.has(absolute(lockPath)) ? { pid: null } : null;
  }

  // -------------------------------------------------------------------------------------------
  // Crashes

  /**
   * Power loss. Returns a new CrashFileSystem holding what the disk would show after reboot;
   * every unsynced choice (F1–F5) is drawn from the seeded PRNG, so the same seed and the same
   * calls give the same state. Unless `kill: false`, this handle and every other handle on the
   * disk die (later calls throw `ECRASHED`; in-flight syncs never settle). The new disk starts a
   * new trace with everything durable.
   */
  crash(options: CrashOptions = {}): CrashFileSystem {
    this.#live('crash');
    const disk = this.#disk;
    const unsynced = options.unsynced ?? 'random';
    if (unsynced !== 'random' && unsynced !== 'keep' && unsynced !== 'lose') {
      throw new TypeError(expectation('unsynced', "'random', 'keep' or 'lose'", unsynced));
    }
    const prng = new Prng(options.seed ?? disk.prng.next());
    let label: string;
    let tree: Tree;
    if (unsynced === 'keep') {
      label = `${disk.traceLength}/${disk.traceLength}/0`;
      tree = disk.replay(disk.traceLength, () => 'keep');
    } else if (unsynced === 'lose') {
      label = `${disk.traceLength}/${disk.traceStart}/0`;
      tree = disk.replay(disk.traceLength, (entry) => (Number.isFinite(entry.durableAt) ? 'keep' : 'drop'));
    } else {
      label = `r${disk.history.filter((step) => step.startsWith('r')).length + 1}`;
      const { decisions, pads } = planRandomCrash(disk, prng);
      tree = disk.replay(disk.traceLength, (entry) => decisions.get(entry.index) ?? 'keep');
      for (const [id, pad] of pads) {
        const node = tree.nodes.get(id);
        if (node !== undefined && node.kind === 'file' && pad.sizeMax > node.size) {
          setFileSize(node, node.size + 1 + (pad.draw % (pad.sizeMax - node.size)));
        }
      }
    }
    const successor = disk.successor(tree, label);
    if (options.kill !== false) disk.kill();
    return handleOn(successor);
  }

  /**
   * The exact state of one {@link CrashPoint} of this disk's trace, as a new CrashFileSystem.
   * This handle stays alive and unchanged, so a test records one run and crashes it at every
   * point: `for (const p of fs.crashPoints()) check(fs.crashAt(p))`.
   */
  crashAt(point: CrashPoint): CrashFileSystem {
    this.#live('crashAt');
    const disk = this.#disk;
    if (point === null || typeof point !== 'object') throw new TypeError(expectation('point', 'a crash point object', point));
    const { at, keep } = point;
    const tornBytes = point.tornBytes ?? 0;
    const zeroTail = point.zeroTail ?? false;
    nonNegativeInteger('point.at', at);
    nonNegativeInteger('point.keep', keep);
    nonNegativeInteger('point.tornBytes', tornBytes);
    if (at < disk.traceStart || at > disk.traceLength) {
      throw new RangeError(expectation('point.at', `in [${disk.traceStart}, ${disk.traceLength}]`, at));
    }
    if (keep < disk.traceStart || keep > at) throw new RangeError(expectation('point.keep', `in [${disk.traceStart}, ${at}]`, keep));
    if (tornBytes > 0 || zeroTail) {
      const cut = keep < at ? disk.entry(keep) : undefined;
      if (cut === undefined || cut.op.kind !== 'write' || cut.durableAt < at) {
        throw new RangeError(expectation('point.keep', 'the index of a write unsynced at `at` when tornBytes or zeroTail is set', keep));
      }
      if (tornBytes >= cut.op.bytes.length)
        throw new RangeError(expectation('point.tornBytes', `below the write's ${cut.op.bytes.length} bytes`, tornBytes));
    }
    const tear: Decision = { tornBytes, zeroTail };
    const tree = disk.replay(at, (entry) => {
      if (entry.durableAt < at || entry.index < keep) return 'keep';
      if (entry.index === keep && (tornBytes > 0 || zeroTail)) return tear;
      return 'drop';
    });
    return handleOn(disk.successor(tree, formatCrashPoint({ at, keep, tornBytes, zeroTail })));
  }

  /**
   * Enumerates crash points of this disk's trace, in order of `at`, for exhaustive tests. With
   * the defaults (`writeback: 'last'`) it yields, for every `at` in [from, to]: `{at, keep: at}`
   * (everything issued landed), then, when entry `at - 1` is an unsynced write of `n` bytes,
   * `{at, keep: at - 1, tornBytes: t}` for each t in [1, n) — every crash point and every torn
   * length of the last write. The state with that write wholly lost is `{at: at - 1, ...}`.
   * `writeback: 'any'` also cuts at every earlier unsynced entry (losing it and every later
   * unsynced one, torn when it is a write). `zeroTail: true` adds the F3 variants.
   */
  *crashPoints(options: CrashPointsOptions = {}): Generator<CrashPoint> {
    const disk = this.#disk;
    const from = options.from ?? disk.traceStart;
    const to = options.to ?? disk.traceLength;
    nonNegativeInteger('from', from);
    nonNegativeInteger('to', to);
    if (from < disk.traceStart || to > disk.traceLength || from > to) {
      throw new RangeError(expectation('from..to', `within [${disk.traceStart}, ${disk.traceLength}]`, `${from}..${to}`));
    }
    const writeback = options.writeback ?? 'last';
    if (writeback !== 'last' && writeback !== 'any') throw new TypeError(expectation('writeback', "'last' or 'any'", writeback));
    const tornLengths = options.tornLengths ?? everyTornLength;
    for (let at = from; at <= to; at++) {
      yield { at, keep: at, tornBytes: 0, zeroTail: false };
      const cuts: number[] = [];
      if (writeback === 'last') {
        if (at - 1 >= from) cuts.push(at - 1);
      } else {
        for (let k = from; k < at; k++) cuts.push(k);
      }
      for (const keep of cuts) {
        const entry = disk.entry(keep);
        if (isSync(entry.op) || entry.durableAt < at) continue;
        if (writeback === 'any') yield { at, keep, tornBytes: 0, zeroTail: false };
        const op = entry.op;
        if (op.kind !== 'write') continue;
        const torn = [...tornLengths(op.bytes.length)].filter((t) => Number.isSafeInteger(t) && t > 0 && t < op.bytes.length);
        for (const tornBytes of torn) yield { at, keep, tornBytes, zeroTail: false };
        if (options.zeroTail === true && op.position + op.bytes.length > op.sizeBefore) {
          for (const tornBytes of [0, ...torn]) yield { at, keep, tornBytes, zeroTail: true };
        }
      }
    }
  }

  /**
   * The process dies, the OS and the disk survive: everything written stays (durable or not, as
   * before), this handle's fds close and its locks are released. Returns a new handle (a new
   * process) on the same disk; this one is dead. The trace continues, so a later `crash()`
   * still knows what was never synced.
   */
  processCrash(): CrashFileSystem {
    this.#live('processCrash');
    this.#die();
    (this.#disk.history as string[]).push('p');
    return handleOn(this.#disk);
  }

  /** Another live process on the same disk (shares files and locks, has its own fds). */
  newProcess(): CrashFileSystem {
    this.#live('newProcess');
    return handleOn(this.#disk);
  }

  /** Marks this handle dead: fds closed, locks released, syncs never settle. */
  #die(): void {
    if (!this.#alive) return;
    this.#alive = false;
    this.#fds.clear();
    for (const path of this.#locks) if (this.#disk.locks.get(path) === this.#hooks) this.#disk.locks.delete(path);
    this.#locks.clear();
    this.#pausedSyncs = [];
    this.#disk.handles.delete(this.#hooks);
  }

  // -------------------------------------------------------------------------------------------
  // The trace

  /** Index of the first entry of this disk's trace (0: a disk's trace starts with the disk). */
  get traceStart(): number {
    return this.#disk.traceStart;
  }

  /** How many entries the trace holds: record it when an operation resolves to know which crash points follow it. */
  get traceLength(): number {
    return this.#disk.traceLength;
  }

  /** The I/O trace: every mutating call on this disk, in order. */
  trace(): TraceEntry[] {
    return this.#disk.trace.map(describeEntry);
  }

  /** `sync(1)`: make every file and directory change so far durable, recorded in the trace. */
  syncAll(): void {
    this.#live('syncAll');
    this.#disk.record({ kind: 'syncAll' }, '/');
  }

  // -------------------------------------------------------------------------------------------
  // Fault injection

  /** Injects a fault; see {@link FaultRule}. Rules do not survive `crash()`; they do survive `processCrash()`. */
  inject(rule: FaultRule): FaultHandle {
    if (rule === null || typeof rule !== 'object') throw new TypeError(expectation('rule', 'an object', rule));
    const ops = new Set<FaultOp>(typeof rule.op === 'string' ? [rule.op] : rule.op);
    if (!(rule.code in ERRNO)) throw new RangeError(expectation('rule.code', `one of ${Object.keys(ERRNO).join(', ')}`, rule.code));
    const nth = rule.nth ?? 1;
    const times = rule.times ?? 1;
    if (!Number.isSafeInteger(nth) || nth < 1) throw new RangeError(expectation('rule.nth', 'a positive integer', nth));
    if (!(times === Infinity || (Number.isSafeInteger(times) && times >= 1)))
      throw new RangeError(expectation('rule.times', 'a positive integer or Infinity', times));
    const state: Rule = { ops, code: rule.code, nth, times, when: rule.when, matched: 0, fired: 0, removed: false };
    this.#disk.rules.push(state);
    const rules = this.#disk.rules;
    return {
      get firedCount() {
        return state.fired;
      },
      remove() {
        state.removed = true;
        const index = rules.indexOf(state);
        if (index >= 0) rules.splice(index, 1);
      },
    };
  }

  /** Removes every injected rule. */
  clearFaults(): void {
    for (const rule of this.#disk.rules) rule.removed = true;
    this.#disk.rules.length = 0;
  }

  /**
   * Turns every injected fault on or off without forgetting it: rules, the space budget and the
   * bit-flip overlay. Off, the same workload runs on the pristine disk. @default true
   */
  setFaultsEnabled(enabled: boolean): void {
    if (typeof enabled !== 'boolean') throw new TypeError(expectation('enabled', 'a boolean', enabled));
    this.#disk.faultsEnabled = enabled;
  }

  /**
   * Sets the space budget in bytes (sum of the sizes of live files, unlinked-but-open included).
   * A write that would exceed it lands the bytes that fit and throws ENOSPC. Raise it again (or
   * pass Infinity) and space returns. It is a property of the disk: it survives crashes.
   */
  setDiskBytesMax(bytes: number): void {
    checkBudget(bytes);
    this.#disk.diskBytesMax = bytes;
  }

  /** Bytes in use, as the space budget counts them. */
  usedBytes(): number {
    return this.#disk.usedBytes();
  }

  /**
   * Flips bit `bit` (0 = least significant) of the byte at `offset` of the file at `path`: a
   * detect-only media fault. It is an overlay beside the pristine contents, seen by every read
   * and by later crash states while faults are enabled; flipping twice restores the byte; a write
   * over the byte clears it.
   */
  flipBit(path: string, offset: number, bit: number): void {
    const full = absolute(path);
    nonNegativeInteger('offset', offset);
    if (!Number.isSafeInteger(bit) || bit < 0 || bit > 7) throw new RangeError(expectation('bit', 'an integer in [0, 7]', bit));
    const id = this.#fileId(full);
    const node = this.#disk.live.file(id);
    if (offset >= node.size) throw new RangeError(expectation('offset', `below the file size ${node.size}`, offset));
    let flips = this.#disk.flips.get(id);
    if (flips === undefined) this.#disk.flips.set(id, (flips = new Map()));
    const mask = (flips.get(offset) ?? 0) ^ (1 << bit);
    if (mask === 0) flips.delete(offset);
    else flips.set(offset, mask);
  }

  /** Holds every fsync/fdatasync/fsyncDir promise unsettled until {@link resumeSyncs}. Their effect on durability is applied at the call, as a device may write early. */
  pauseSyncs(): void {
    this.#syncsPaused = true;
  }

  /** Settles the syncs {@link pauseSyncs} held, in call order. */
  resumeSyncs(): void {
    this.#syncsPaused = false;
    const waiting = this.#pausedSyncs;
    this.#pausedSyncs = [];
    for (const resume of waiting) resume();
  }

  /** How many sync promises {@link pauseSyncs} is holding. */
  get pausedSyncCount(): number {
    return this.#pausedSyncs.length;
  }

  // -------------------------------------------------------------------------------------------
  // Inspection

  /** The contents of a file (bit flips applied unless `pristine` or faults are off). */
  readFile(path: string, options: { pristine?: boolean } = {}): Uint8Array {
    const id = this.#fileId(absolute(path));
    const node = this.#disk.live.file(id);
    const out = node.data.slice(0, node.size);
    if (options.pristine !== true) this.#disk.overlay(id, 0, out);
    return out;
  }

  /** Absolute paths of every file under `dir`, sorted. */
  listFiles(dir = '/'): string[] {
    const prefix = absolute(dir);
    const files: string[] = [];
    for (const [path, , node] of this.#disk.live.walk()) {
      if (node.kind === 'file' && (prefix === '/' || path.startsWith(`${prefix}/`))) files.push(path);
    }
    return files.sort();
  }

  /** Every file's contents by path, sorted by path (bit flips applied unless `pristine`). */
  snapshot(options: { pristine?: boolean } = {}): Map<string, Uint8Array> {
    const out = new Map<string, Uint8Array>();
    for (const path of this.listFiles()) out.set(path, this.readFile(path, options));
    return out;
  }

  /** Counters of what this disk did. */
  stats(): CrashFsStats {
    return { ...this.#disk.counters };
  }

  // -------------------------------------------------------------------------------------------
  // Internals

  #live(syscall: string): void {
    if (!this.#alive) throw crashedError(syscall);
  }

  #fd(fd: number, syscall: string): OpenFile {
    const file = this.#fds.get(fd);
    if (file === undefined) throw systemError('EBADF', syscall);
    return file;
  }

  #resolve(full: string, syscall: string): Resolved {
    const names = components(full);
    if (names.length === 0) return { parentId: ROOT, parent: this.#disk.live.dir(ROOT), name: '', id: ROOT };
    let id = ROOT;
    let current = '';
    for (let i = 0; i < names.length - 1; i++) {
      current += `/${names[i]}`;
      const child = this.#dirNode(id, syscall, current).entries.get(names[i]!);
      if (child === undefined) throw systemError('ENOENT', syscall, full);
      id = child;
    }
    const parent = this.#dirNode(id, syscall, full);
    const name = names[names.length - 1]!;
    return { parentId: id, parent, name, id: parent.entries.get(name) };
  }

  #dirNode(id: NodeId, syscall: string, path: string): DirNode {
    const node = this.#disk.live.nodes.get(id)!;
    if (node.kind !== 'dir') throw systemError('ENOTDIR', syscall, path);
    return node;
  }

  #fileId(full: string): NodeId {
    const { id } = this.#resolve(full, 'open');
    if (id === undefined) throw systemError('ENOENT', 'open', full);
    if (this.#disk.live.nodes.get(id)!.kind !== 'file') throw systemError('EISDIR', 'open', full);
    return id;
  }

  #syncFile(fd: number, kind: 'fsync' | 'fdatasync'): Promise<void> {
    return this.#deferred(() => this.#syncEffect(fd, kind));
  }

  #syncFileNow(fd: number, kind: 'fsync' | 'fdatasync'): void {
    if (!this.#alive) throw crashedError('sync');
    this.#syncEffect(fd, kind);
  }

  #syncEffect(fd: number, kind: 'fsync' | 'fdatasync'): void {
    this.#live(kind);
    const file = this.#fd(fd, kind);
    const disk = this.#disk;
    if (kind === 'fsync') disk.counters.fsyncCount++;
    else disk.counters.fdatasyncCount++;
    try {
      disk.check({ op: kind, path: file.path });
    } catch (error) {
      disk.counters.syncFailureCount++;
      disk.record({ kind, node: file.node, ok: false }, file.path);
      throw error;
    }
    disk.record({ kind, node: file.node, ok: true }, file.path);
  }

  /** Runs `effect` now (durability is decided at the call) and settles asynchronously, like a threadpool call. */
  #deferred(effect: () => void): Promise<void> {
    if (!this.#alive) return Promise.reject(crashedError('sync'));
    let failure: unknown;
    let failed = false;
    try {
      effect();
    } catch (error) {
      failure = error;
      failed = true;
    }
    return new Promise<void>((resolve, reject) => {
      const settle = () => {
        if (!this.#alive) return; // A dead process sees nothing more.
        if (failed) reject(failure);
        else resolve();
      };
      setImmediate(() => {
        if (this.#syncsPaused) this.#pausedSyncs.push(settle);
        else settle();
      });
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

function everyTornLength(length: number): Iterable<number> {
  return {
    *[Symbol.iterator]() {
      for (let t = 1; t < length; t++) yield t;
    },
  };
}

function checkBudget(bytes: number): void {
  if (typeof bytes !== 'number' || !(bytes === Infinity || (Number.isSafeInteger(bytes) && bytes >= 0))) {
    throw new RangeError(expectation('diskBytesMax', 'a non-negative integer or Infinity', bytes));
  }
}

function absolute(path: string): string {
  if (typeof path !== 'string' || !path.startsWith('/')) throw new TypeError(expectation('path', 'an absolute path', path));
  const normal = posix.normalize(path);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

function components(full: string): string[] {
  return full.split('/').filter((name) => name.length > 0);
}

function checkRange(buffer: Uint8Array, offset: number, length: number, position: number): void {
  if (!(buffer instanceof Uint8Array)) throw new TypeError(expectation('buffer', 'a Uint8Array', buffer));
  nonNegativeInteger('offset', offset);
  nonNegativeInteger('length', length);
  nonNegativeInteger('position', position);
  if (offset + length > buffer.length)
    throw new RangeError(expectation('offset + length', `at most buffer.length (${buffer.length})`, offset + length));
}

function describeEntry(entry: Entry): TraceEntry {
  const op = entry.op;
  const durableAt = Number.isFinite(entry.durableAt) && !isSync(op) ? entry.durableAt : null;
  const common = { index: entry.index, path: entry.path, durableAt };
  switch (op.kind) {
    case 'write':
      return { ...common, kind: 'write', position: op.position, length: op.bytes.length };
    case 'truncate':
      return { ...common, kind: 'truncate', length: op.length };
    case 'create':
      return { ...common, kind: op.type === 'dir' ? 'mkdir' : 'create' };
    case 'rename':
      return { ...common, kind: 'rename', ...(entry.toPath === undefined ? {} : { to: entry.toPath }) };
    case 'fsync':
    case 'fdatasync':
    case 'fsyncDir':
      return { ...common, kind: op.kind, ok: op.ok };
    default:
      return { ...common, kind: op.kind };
  }
}

/** Random crash choices, drawn in trace order so the same seed gives the same state. */
function planRandomCrash(
  disk: Disk,
  prng: Prng,
): { decisions: Map<number, Decision>; pads: Map<NodeId, { sizeMax: number; draw: number }> } {
  const decisions = new Map<number, Decision>();
  const pads = new Map<NodeId, { sizeMax: number; draw: number }>();
  const groups = new Map<NodeId, { pending: Entry[]; uncertain: Entry[] }>();
  for (const entry of disk.trace) {
    if (isSync(entry.op) || Number.isFinite(entry.durableAt)) continue;
    const owner = ownerOf(entry.op);
    let group = groups.get(owner);
    if (group === undefined) groups.set(owner, (group = { pending: [], uncertain: [] }));
    (entry.uncertain ? group.uncertain : group.pending).push(entry);
  }
  const tear = (entry: Entry): Decision => {
    const op = entry.op;
    if (op.kind !== 'write' || op.bytes.length < 2) return 'drop';
    return { tornBytes: 1 + prng.int(op.bytes.length - 1), zeroTail: prng.bool(0.25) };
  };
  for (const [owner, group] of groups) {
    // F5: each write a failed sync covered lands, is lost or is torn, independently.
    for (const entry of group.uncertain) {
      const choice = prng.int(3);
      decisions.set(entry.index, choice === 0 ? 'drop' : choice === 1 ? 'keep' : tear(entry));
    }
    // F1/F2: a prefix of the pending changes survives; the extremes get extra weight.
    const pending = group.pending;
    const shape = prng.int(4);
    const kept = shape === 0 ? 0 : shape === 1 ? pending.length : prng.int(pending.length + 1);
    for (const [i, entry] of pending.entries()) decisions.set(entry.index, i < kept ? 'keep' : 'drop');
    if (kept < pending.length && prng.bool(0.5)) decisions.set(pending[kept]!.index, tear(pending[kept]!));
    // F3: the size may have reached the disk without the data.
    if (kept < pending.length || group.uncertain.length > 0) {
      let sizeMax = 0;
      for (const entry of [...group.uncertain, ...pending]) {
        if (entry.op.kind === 'write') sizeMax = Math.max(sizeMax, entry.op.position + entry.op.bytes.length);
      }
      if (sizeMax > 0 && prng.bool(0.25)) pads.set(owner, { sizeMax, draw: prng.next() });
    }
  }
  return { decisions, pads };
}
