/**
 * The crash-recovery model: a workload (a program of queue operations, crashes and injected
 * faults), an interpreter that runs it over the real queue (`Builder` + `LogStore` on the
 * simulated crash disk), and a checker that compares every recovered state with a reference
 * model. Workload, model and checker are separate (STYLE.md, TigerBeetle section): the program
 * says what happens, `Model` records what the queue promised, `checkRecovered`/`checkDelivery`
 * say what must hold. Used by test/crash/model.test.ts (fast-check generates the programs) and
 * by fuzz/engine-crash (a seeded PRNG generates them).
 *
 * Properties:
 * - every push that resolved under `sync`/`group` is present after any recovery, unless its ack
 *   resolved before the crash; under `none`, a resolved push survives a process crash and a
 *   clean close (it may be lost only by power loss: it was never synced);
 * - nothing is invented: every recovered or delivered payload was pushed, with exactly its bytes;
 * - FIFO by seq: recovery returns seqs strictly increasing, and each delivery is the ready item
 *   with the lowest seq;
 * - a seq never names two payloads (unless the first was never durable and recovery gave the
 *   seq back: `nextSeq` went below it);
 * - an ack that resolved under `sync`/`group` (or before a clean close) is never redelivered;
 * - with lazy acks (`Program.lazyAcks`), an ack that resolved survives a process crash, and one
 *   whose sync completed survives power loss: a redelivered item's ack was never synced;
 * - every crash state of F1–F4 opens (`ERR_CORRUPT` only after a failed fsync left data in an
 *   unknown state, F5);
 * - after a failed fsync the instance fails with `ERR_STORE_FAILED` for everything after, and
 *   reopening (close + open, no crash) recovers everything that was durable;
 * - after ENOSPC the failed push rejects (`ERR_STORE_FULL`, or `ERR_STORE_FAILED` when the space
 *   ran out in a metadata write such as a new segment or a cursor checkpoint), nothing
 *   acknowledged is lost, and pushing works again once space returns (after a reopen when the
 *   instance failed);
 * - liveness: after the program, with faults off, a drain delivers exactly everything recovered,
 *   and once acked a reopen finds nothing.
 * Bit flips in synced data are checked by {@link runBitFlip}.
 */
import { Builder, type Consumer, type Producer, type Reserved } from '../src/core/builder.js';
import { LogStore, type LogStoreOptions } from '../src/stores/log/log-store.js';
import { isQueueError } from '../src/contract/errors.js';
import { CrashFileSystem, type FaultHandle, ManualClock, type Prng } from '../src/testing/index.js';

/**
 * tryReserve(), given a few turns of the event loop when it finds nothing while items are ready:
 * a redelivery waits for its delivery mark to be stored (at once, unless a cursor checkpoint is
 * replacing the file). Nothing after those turns is a liveness failure, as before.
 */
async function reserveSoon(rx: Consumer): Promise<Reserved | null> {
  let r = rx.tryReserve();
  for (let turn = 0; r === null && turn < 64 && rx.stats().ready > 0; turn++) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    r = rx.tryReserve();
  }
  return r;
}

export type Policy = 'sync' | 'group' | 'none';
export const POLICIES: readonly Policy[] = ['sync', 'group', 'none'];

/** One step of a workload. `pick` values select among held reservations modulo their count. */
export type Op =
  | { readonly kind: 'push'; readonly size: number }
  | { readonly kind: 'pushMany'; readonly sizes: readonly number[] }
  /** `pushes` concurrent pushes and `acks` concurrent acks, awaited together (group commit). */
  | { readonly kind: 'burst'; readonly pushes: number; readonly acks: number; readonly size: number }
  | { readonly kind: 'reserve'; readonly count: number }
  | { readonly kind: 'ack'; readonly pick: number }
  | { readonly kind: 'nack'; readonly pick: number }
  /** `Reserved[Symbol.asyncDispose]`: an unsettled reservation dropped by `await using`. */
  | { readonly kind: 'drop'; readonly pick: number }
  | { readonly kind: 'compact' }
  | { readonly kind: 'reopen'; readonly policy: Policy }
  /** Power loss (or a process crash) with `inFlight` pushes and acks issued and not awaited, after `ticks` event-loop turns. */
  | { readonly kind: 'crash'; readonly process: boolean; readonly inFlight: number; readonly ticks: number; readonly policy: Policy }
  /** The `nth` next fsync/fdatasync fails with EIO. */
  | { readonly kind: 'eio'; readonly nth: number }
  /** The disk fills `slackBytes` past what is used; `pushes` pushes; then space returns and a push must succeed. */
  | { readonly kind: 'enospc'; readonly slackBytes: number; readonly pushes: number; readonly size: number }
  /** The `nth` next open(2) fails with EMFILE. */
  | { readonly kind: 'emfile'; readonly nth: number };

export interface Program {
  readonly diskSeed: number;
  readonly policy: Policy;
  readonly segmentBytes: number;
  readonly cursorCheckpointBytes: number;
  readonly tailCacheBytes: number;
  readonly preallocate: boolean;
  readonly autoCompact: boolean;
  /** LogStore's `blockingSync`: every fsync and fdatasync on the calling thread. Absent: false. */
  readonly blockingSync?: boolean;
  /**
   * 0 or absent: acks follow `policy`. n > 0: acks are `lazy`, synced once n of them wait (the
   * delay bound is set too long to fire, so a run does not depend on timing).
   */
  readonly lazyAcks?: number;
  readonly ops: readonly Op[];
}

export interface RunStats {
  ops: number;
  crashes: number;
  recoveries: number;
  faultsFired: number;
  delivered: number;
  /** Times tryReserve returned null for a read that failed the queue (core quirk). */
  nullOnReadFailure: number;
}

/** A property failed. The message starts with what failed; `reproLine` is the crash disk's reproduction. */
export class PropertyViolation extends Error {
  constructor(
    message: string,
    readonly reproLine: string,
  ) {
    super(`${message} [crash-fs: ${reproLine}]`);
    this.name = 'PropertyViolation';
  }
}

// ---------------------------------------------------------------------------------------------
// Workload generation with a seeded PRNG (fuzz/engine-crash; the fast-check test has its own arbitraries)

export function randomProgram(rnd: Prng, opCount: number): Program {
  const size = (): number => (rnd.bool(0.2) ? rnd.int(400) : rnd.int(40));
  const ops: Op[] = [];
  for (let i = 0; i < opCount; i++) {
    const d = rnd.int(100);
    if (d < 20) ops.push({ kind: 'push', size: size() });
    else if (d < 27) ops.push({ kind: 'pushMany', sizes: Array.from({ length: 1 + rnd.int(6) }, size) });
    else if (d < 34) ops.push({ kind: 'burst', pushes: 1 + rnd.int(8), acks: rnd.int(4), size: size() });
    else if (d < 50) ops.push({ kind: 'reserve', count: 1 + rnd.int(4) });
    else if (d < 62) ops.push({ kind: 'ack', pick: rnd.int(1000) });
    else if (d < 66) ops.push({ kind: 'nack', pick: rnd.int(1000) });
    else if (d < 69) ops.push({ kind: 'drop', pick: rnd.int(1000) });
    else if (d < 73) ops.push({ kind: 'compact' });
    else if (d < 78) ops.push({ kind: 'reopen', policy: rnd.pick(POLICIES) });
    else if (d < 90)
      ops.push({ kind: 'crash', process: rnd.bool(0.25), inFlight: rnd.int(6), ticks: rnd.int(4), policy: rnd.pick(POLICIES) });
    else if (d < 94) ops.push({ kind: 'eio', nth: 1 + rnd.int(4) });
    else if (d < 98) ops.push({ kind: 'enospc', slackBytes: rnd.int(600), pushes: 1 + rnd.int(4), size: size() });
    else ops.push({ kind: 'emfile', nth: 1 + rnd.int(3) });
  }
  return {
    diskSeed: rnd.next() >>> 0,
    policy: rnd.pick(POLICIES),
    segmentBytes: 256 + rnd.int(1024),
    cursorCheckpointBytes: 32 + rnd.int(512),
    tailCacheBytes: rnd.bool() ? 0 : rnd.int(4096),
    preallocate: rnd.bool(),
    autoCompact: rnd.bool(0.7),
    blockingSync: rnd.bool(0.25),
    ops,
  };
}

// ---------------------------------------------------------------------------------------------
// The model: what the queue promised

/** How strongly something survives: 0 not at all, 1 a process crash, 2 power loss. */
type Durability = 0 | 1 | 2;

interface Item {
  readonly id: number;
  readonly bytes: Uint8Array;
  /** Known once the push resolved, or once the item was recovered. */
  seq: number | null;
  state: 'pending' | 'stored' | 'full' | 'uncertain';
  durable: Durability;
  ackIssued: boolean;
  ackDurable: Durability;
  /** Acked durably at some point: must never be delivered again. */
  everAckedDurably: boolean;
}

const ID_BYTES = 4;

/** A payload that names its push: a 4-byte id then `size` bytes derived from it, so bytes are checkable. */
export function payload(id: number, size: number): Uint8Array {
  const out = new Uint8Array(ID_BYTES + size);
  new DataView(out.buffer).setUint32(0, id);
  let x = (id * 2654435761) >>> 0;
  for (let i = ID_BYTES; i < out.length; i++) {
    x = (Math.imul(x ^ (x >>> 15), 0x2c1b3c6d) + i) >>> 0;
    out[i] = x & 0xff;
  }
  return out;
}

function idOf(bytes: Uint8Array): number {
  return bytes.length < ID_BYTES ? -1 : new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** How the previous instance ended, which sets what recovery must show. */
type Ending = 'clean' | 'process' | 'power' | 'failed';

export class Model {
  readonly items = new Map<number, Item>();
  /** seq -> id of the payload that owns it. */
  readonly seqOwner = new Map<number, number>();
  nextId = 1;

  newItem(size: number): Item {
    const id = this.nextId++;
    const item: Item = {
      id,
      bytes: payload(id, size),
      seq: null,
      state: 'pending',
      durable: 0,
      ackIssued: false,
      ackDurable: 0,
      everAckedDurably: false,
    };
    this.items.set(id, item);
    return item;
  }

  /** A clean close made everything written durable. */
  closedCleanly(): void {
    for (const item of this.items.values()) {
      if (item.state === 'stored') item.durable = 2;
      if (item.state === 'stored' && item.ackIssued && item.ackDurable >= 1) {
        item.ackDurable = 2;
        item.everAckedDurably = true;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The checker

/**
 * Checks a recovered state (everything `read` returns right after open, and the store's
 * `nextSeq`/`count`) against the model, then adopts it: what is present is durable now (recovery
 * fsyncs what it serves, FORMAT.md §6.2), what is absent is gone.
 * `uncertain` (after a failed fsync, F5) drops the "must be present" check.
 */
export function checkRecovered(
  model: Model,
  got: readonly { seq: number; bytes: Uint8Array }[],
  nextSeq: number,
  count: number,
  ending: Ending,
  uncertain: boolean,
  fail: (message: string) => never,
): void {
  const need: Durability = ending === 'power' ? 2 : 1;
  const present = new Map<number, number>(); // id -> seq
  let prev = 0;
  for (const it of got) {
    if (it.seq <= prev) fail(`recovered seqs not strictly increasing: ${it.seq} after ${prev}`);
    prev = it.seq;
    const id = idOf(it.bytes);
    const item = model.items.get(id);
    if (item === undefined) fail(`recovered seq ${it.seq} holds a payload that was never pushed (id ${id}, ${it.bytes.length} bytes)`);
    if (!sameBytes(item.bytes, it.bytes)) fail(`recovered seq ${it.seq} (id ${id}) has different bytes than pushed`);
    if (present.has(id)) fail(`payload id ${id} recovered twice (seqs ${present.get(id)} and ${it.seq})`);
    present.set(id, it.seq);
    if (item.everAckedDurably) fail(`seq ${it.seq} (id ${id}) came back although its ack resolved durably`);
    if (item.ackIssued && item.ackDurable >= need)
      fail(
        `seq ${it.seq} (id ${id}) came back after a ${ending} ending although its ack resolved (${item.ackDurable === 2 ? 'synced' : 'written'})`,
      );
    if (item.state === 'full' && ending !== 'power')
      fail(`seq ${it.seq} (id ${id}) was rejected with ERR_STORE_FULL but is stored (no power loss since)`);
    if (item.seq !== null && item.seq !== it.seq) fail(`id ${id} was stored with seq ${item.seq} but recovered with seq ${it.seq}`);
    const owner = model.seqOwner.get(it.seq);
    if (owner !== undefined && owner !== id) fail(`seq ${it.seq} names two payloads: id ${owner} before, id ${id} now`);
  }
  if (count !== got.length) fail(`store reports count ${count} but ${got.length} items are readable`);
  if (got.length > 0 && nextSeq <= got[got.length - 1]!.seq)
    fail(`nextSeq ${nextSeq} is not above the last recovered seq ${got[got.length - 1]!.seq}`);
  for (const item of model.items.values()) {
    if (item.seq === null || present.has(item.id)) continue;
    // An ack that was issued may have landed even if it never resolved: then the item may be gone.
    const mustBePresent = item.state === 'stored' && item.durable >= need && !item.ackIssued;
    if (mustBePresent && !uncertain) {
      fail(
        `seq ${item.seq} (id ${item.id}) was pushed durably (${item.durable === 2 ? 'synced' : 'written'}) and not acked, but is missing after a ${ending} recovery`,
      );
    }
    if (item.everAckedDurably && nextSeq <= item.seq) fail(`nextSeq ${nextSeq} would reuse seq ${item.seq}, whose ack resolved durably`);
  }
  // Adopt the recovered state.
  for (const item of model.items.values()) {
    const seq = present.get(item.id);
    if (seq !== undefined) {
      item.seq = seq;
      item.state = 'stored';
      item.durable = 2;
      item.ackIssued = false;
      item.ackDurable = 0;
      model.seqOwner.set(seq, item.id);
    } else if (item.state !== 'full') {
      // Gone (acked, or lost before it was durable). Its seq may be handed out again only if recovery gave it back.
      if (item.seq !== null && item.seq >= nextSeq) {
        if (model.seqOwner.get(item.seq) === item.id) model.seqOwner.delete(item.seq);
      }
      if (!item.everAckedDurably) item.state = 'uncertain';
      item.ackIssued = true;
    }
  }
  for (const [seq] of model.seqOwner) if (seq >= nextSeq) model.seqOwner.delete(seq);
}

// ---------------------------------------------------------------------------------------------
// The interpreter

const DIR = '/data/q';

/** Every unacked item, reading on until a read returns nothing (a read stops early at damage; the next one throws). */
export function readAll(store: LogStore): { seq: number; bytes: Uint8Array }[] {
  const out: { seq: number; bytes: Uint8Array }[] = [];
  for (;;) {
    const got = store.read({ after: out.length === 0 ? 0 : out[out.length - 1]!.seq, before: Number.MAX_SAFE_INTEGER, limit: 1e9 });
    if (got.length === 0) return out;
    out.push(...got);
  }
}

class Stop extends Error {}

/** One open queue instance. */
interface Session {
  readonly id: number;
  store: LogStore;
  tx: Producer;
  rx: Consumer;
  policy: Policy;
  /** Acks are lazy in this session: a resolved ack is only written until a sync covers it. */
  lazy: boolean;
  /** Items stored and not in flight, acked or being acked: the ones a reserve may return. */
  ready: Set<number>;
  /** Seq -> item, for this session. */
  bySeq: Map<number, Item>;
  held: { r: Reserved; item: Item }[];
  failed: boolean;
  dead: boolean;
  /** A fault fired or the disk was full during this session: a later ERR_STORE_FAILED is explained. */
  sawFault: boolean;
}

export interface RunOptions {
  /** Called with every violation message before it is thrown (fuzzers count them). */
  readonly onViolation?: (message: string) => void;
  /** Wraps the disk (and every disk a crash returns): the canary passes a disk whose fsyncs lie. */
  readonly wrapDisk?: (fs: CrashFileSystem) => CrashFileSystem;
}

/**
 * Runs `program` and then the drain phase; throws {@link PropertyViolation} on the first broken
 * property. Deterministic for a given program.
 */
export async function runProgram(program: Program, options: RunOptions = {}): Promise<RunStats> {
  const runner = new Runner(program, options.wrapDisk);
  try {
    await runner.run();
  } catch (e) {
    if (e instanceof PropertyViolation) {
      options.onViolation?.(e.message);
      throw e;
    }
    if (e instanceof Stop) return runner.stats;
    throw new PropertyViolation(`unexpected exception: ${(e as Error)?.stack ?? String(e)}`, runner.fs.reproLine());
  }
  return runner.stats;
}

class Runner {
  fs: CrashFileSystem;
  readonly model = new Model();
  readonly stats: RunStats = { ops: 0, crashes: 0, recoveries: 0, faultsFired: 0, delivered: 0, nullOnReadFailure: 0 };
  session!: Session;
  sessionCount = 0;
  /** A fsync failed on this disk since the last power loss: its data is in an unknown state (F5). */
  tainted = false;
  eio: FaultHandle | null = null;
  emfile: FaultHandle | null = null;
  diskFull = false;
  readonly storeOptions: LogStoreOptions;

  constructor(
    readonly program: Program,
    readonly wrapDisk: (fs: CrashFileSystem) => CrashFileSystem = (fs) => fs,
  ) {
    this.fs = wrapDisk(new CrashFileSystem({ seed: program.diskSeed }));
    this.storeOptions = {
      segmentBytes: program.segmentBytes,
      cursorCheckpointBytes: program.cursorCheckpointBytes,
      tailCacheBytes: program.tailCacheBytes,
      preallocate: program.preallocate,
      autoCompact: program.autoCompact,
      blockingSync: program.blockingSync ?? false,
      readAheadBytes: 128,
      // A clock that never moves: the delayed compaction round would otherwise run at wall-clock
      // moments, and a program must do the same I/O each time its seed is replayed.
      clock: new ManualClock(),
    };
  }

  fail(message: string): never {
    throw new PropertyViolation(message, this.fs.reproLine());
  }

  /** A fault we injected has fired in this session (or the disk was full): failures are explained. */
  faultFired(): boolean {
    return this.diskFull || this.session?.sawFault === true || (this.eio?.firedCount ?? 0) > 0 || (this.emfile?.firedCount ?? 0) > 0;
  }

  async run(): Promise<void> {
    await this.runOps();
    await this.drain();
  }

  /** Phase 1: the program, crashes and faults on. */
  async runOps(): Promise<void> {
    await this.open(this.program.policy, 'clean', true);
    for (const op of this.program.ops) {
      this.stats.ops++;
      await this.step(op);
    }
  }

  // ---- sessions

  async open(policy: Policy, ending: Ending, first = false): Promise<void> {
    let store: LogStore | undefined;
    for (let attempt = 0; store === undefined; attempt++) {
      try {
        store = await LogStore.open(DIR, { ...this.storeOptions, fs: this.fs });
      } catch (e) {
        const code = (e as { code?: string }).code;
        if (e instanceof Error && e.name === 'OpenError' && code === 'ERR_STORE' && this.faultFired() && attempt < 4) {
          this.noteFaults();
          continue; // a transient injected error (EMFILE, EIO): nothing changed, open again
        }
        if (code === 'ERR_CORRUPT' && this.tainted && ending === 'power') throw new Stop(); // F5: allowed, the run ends here
        this.fail(`open after a ${ending} ending failed: ${(e as Error)?.name} ${code}: ${(e as Error)?.message}`);
      }
    }
    let got: readonly { seq: number; bytes: Uint8Array }[];
    try {
      got = readAll(store);
    } catch (e) {
      if (isQueueError(e, 'ERR_CORRUPT') && this.tainted && ending === 'power') throw new Stop();
      this.fail(`reading the recovered store failed: ${(e as Error)?.message}`);
    }
    const r = store.inspect();
    if (!first) {
      this.stats.recoveries++;
      checkRecovered(this.model, got, r.nextSeq, r.count, ending, this.tainted && ending === 'power', (m) => this.fail(m));
    }
    let tx: Producer, rx: Consumer;
    const lazy = (this.program.lazyAcks ?? 0) > 0 && policy !== 'none';
    const builder = new Builder(store).durability(policy);
    if (lazy) {
      builder.ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: this.program.lazyAcks! });
      this.watchLazyAcks(store, this.sessionCount + 1);
    } else if (policy !== 'none') builder.ackDurability(policy);
    try {
      [tx, rx] = await builder.open();
    } catch (e) {
      this.fail(`Builder.open failed: ${(e as Error)?.message}`);
    }
    const bySeq = new Map<number, Item>();
    for (const it of got) bySeq.set(it.seq, this.model.items.get(idOf(it.bytes))!);
    if (rx.stats().ready !== got.length) this.fail(`queue reports ${rx.stats().ready} ready, ${got.length} recovered`);
    this.session = {
      id: ++this.sessionCount,
      store,
      tx,
      rx,
      policy,
      lazy,
      ready: new Set(bySeq.keys()),
      bySeq,
      held: [],
      failed: false,
      dead: false,
      sawFault: false,
    };
  }

  /**
   * Lazy acks are durable once a sync that started after their store call resolved has
   * completed: the store's `ack` and `sync` are watched to learn which ones, seen from the store.
   */
  watchLazyAcks(store: LogStore, sessionId: number): void {
    const written = new Set<number>();
    const ack = store.ack.bind(store);
    const sync = store.sync.bind(store);
    store.ack = (seqs, flag) =>
      ack(seqs, flag).then(() => {
        for (const seq of seqs) written.add(seq);
      });
    store.sync = () => {
      const covered = [...written];
      written.clear();
      return sync().then(() => {
        const s = this.session;
        // A sync that completed after a crash (on the disk left behind) makes nothing durable.
        if (s.id !== sessionId || s.dead) return;
        for (const seq of covered) {
          const item = s.bySeq.get(seq);
          if (item?.ackIssued) {
            item.ackDurable = 2;
            item.everAckedDurably = true;
          }
        }
      });
    };
  }

  /** Close the current session cleanly (or, when it failed, release it) and reopen. */
  async reopen(policy: Policy): Promise<void> {
    const s = this.session;
    s.dead = true;
    const failed = s.failed;
    try {
      await s.tx.close();
    } catch (e) {
      if (!(isQueueError(e, 'ERR_STORE_FAILED') && this.faultFired())) this.fail(`close failed: ${(e as Error)?.message}`);
      this.noteFaults();
      await this.open(policy, 'failed');
      return;
    }
    if (failed) await this.open(policy, 'failed');
    else {
      this.model.closedCleanly();
      await this.open(policy, 'clean');
    }
  }

  async crash(processOnly: boolean, policy: Policy): Promise<void> {
    this.session.dead = true;
    this.stats.crashes++;
    this.noteFaults(); // an EIO that fired before the crash leaves F5 data on this disk
    this.eio = null;
    this.emfile = null;
    if (processOnly) {
      this.fs = this.fs.processCrash();
      this.fs.clearFaults();
      await this.open(policy, 'process');
    } else {
      this.fs = this.fs.crash();
      try {
        await this.open(policy, 'power');
      } finally {
        this.tainted = false; // a new disk: everything on it is durable
      }
    }
  }

  /** Fired rules are spent: remember that they fired, then drop them. */
  noteFaults(): void {
    if ((this.eio?.firedCount ?? 0) > 0) {
      this.tainted = true;
      this.stats.faultsFired++;
      this.eio!.remove();
      this.eio = null;
      if (this.session !== undefined) this.session.sawFault = true;
    }
    if ((this.emfile?.firedCount ?? 0) > 0) {
      this.stats.faultsFired++;
      this.emfile!.remove();
      this.emfile = null;
      if (this.session !== undefined) this.session.sawFault = true;
    }
  }

  /** An operation rejected: anything but the expected codes breaks a property. */
  onError(e: unknown, what: string): 'full' | 'failed' {
    if (isQueueError(e, 'ERR_STORE_FULL')) {
      if (!this.diskFull) this.fail(`${what} rejected with ERR_STORE_FULL, but the disk has space`);
      return 'full';
    }
    if (isQueueError(e, 'ERR_STORE_FAILED')) {
      if (!this.faultFired()) this.fail(`${what} rejected with ERR_STORE_FAILED but no fault was injected: ${(e as Error).message}`);
      this.noteFaults();
      this.session.failed = true;
      return 'failed';
    }
    this.fail(
      `${what} rejected with an unexpected error: ${(e as Error)?.name} ${(e as { code?: string }).code}: ${(e as Error)?.message}`,
    );
  }

  /** After a failure: everything later rejects with ERR_STORE_FAILED; then close and reopen. */
  async recoverFromFailure(): Promise<void> {
    const s = this.session;
    const probe = this.model.newItem(1);
    probe.state = 'full'; // never stored: a failed instance stores nothing
    try {
      await s.tx.push(probe.bytes);
      this.fail('a push on a failed queue resolved');
    } catch (e) {
      if (e instanceof PropertyViolation) throw e;
      if (!isQueueError(e, 'ERR_STORE_FAILED'))
        this.fail(`a push on a failed queue rejected with ${(e as { code?: string }).code}, not ERR_STORE_FAILED`);
    }
    if (s.held.length > 0) {
      try {
        await s.held[0]!.r.ack();
        this.fail('an ack on a failed queue resolved');
      } catch (e) {
        if (e instanceof PropertyViolation) throw e;
        if (!isQueueError(e, 'ERR_STORE_FAILED'))
          this.fail(`an ack on a failed queue rejected with ${(e as { code?: string }).code}, not ERR_STORE_FAILED`);
      }
    }
    await this.reopen(s.policy);
  }

  // ---- operations (each updates the model when it settles)

  push(sizes: readonly number[], many: boolean): Promise<void> {
    const s = this.session;
    const items = sizes.map((n) => this.model.newItem(n));
    const p: Promise<number | number[]> = many ? s.tx.pushMany(items.map((i) => i.bytes)) : s.tx.push(items[0]!.bytes);
    return p.then(
      (res) => {
        if (s.dead) return; // the crash came first: the model already treats these as pending
        const seqs = Array.isArray(res) ? res : [res];
        seqs.forEach((seq, i) => {
          const item = items[i]!;
          const owner = this.model.seqOwner.get(seq);
          if (owner !== undefined && owner !== item.id) this.fail(`push resolved with seq ${seq}, which already names payload id ${owner}`);
          this.model.seqOwner.set(seq, item.id);
          item.seq = seq;
          item.state = 'stored';
          item.durable = s.policy === 'none' ? 1 : 2;
          s.bySeq.set(seq, item);
          s.ready.add(seq);
        });
      },
      (e: unknown) => {
        if (s.dead) return;
        const kind = this.onError(e, 'push');
        for (const item of items) item.state = kind === 'full' ? 'full' : 'uncertain';
      },
    );
  }

  async reserve(count: number): Promise<boolean> {
    const s = this.session;
    for (let i = 0; i < count; i++) {
      let r: Reserved | null;
      try {
        r = await reserveSoon(s.rx);
      } catch (e) {
        this.onError(e, 'tryReserve');
        return false;
      }
      const min = s.ready.size === 0 ? null : Math.min(...s.ready);
      if (r === null) {
        if (min !== null) {
          // A store read that failed with an I/O error fails the queue, but the tryReserve that met
          // it returns null instead of throwing (the core's documented behaviour): the next call throws.
          try {
            s.rx.tryReserve();
          } catch (e) {
            this.stats.nullOnReadFailure++;
            this.onError(e, 'tryReserve after a read failure');
            return false;
          }
          this.fail(`tryReserve returned nothing while seq ${min} is ready`);
        }
        return true;
      }
      this.checkDelivery(r, min);
      s.ready.delete(r.seq);
      s.held.push({ r, item: s.bySeq.get(r.seq)! });
    }
    return true;
  }

  checkDelivery(r: Reserved, min: number | null): void {
    const s = this.session;
    this.stats.delivered++;
    const item = s.bySeq.get(r.seq);
    if (item === undefined) this.fail(`delivered seq ${r.seq}, which this session never stored or recovered`);
    if (min !== r.seq) this.fail(`delivered seq ${r.seq}, but the ready item with the lowest seq is ${min} (FIFO by seq)`);
    if (!sameBytes(item.bytes, r.bytes)) this.fail(`delivered seq ${r.seq} with bytes different from what was pushed`);
    if (item.everAckedDurably) this.fail(`delivered seq ${r.seq}, whose ack resolved durably`);
  }

  takeHeld(pick: number): { r: Reserved; item: Item } | null {
    const held = this.session.held;
    if (held.length === 0) return null;
    return held.splice(pick % held.length, 1)[0]!;
  }

  ack(h: { r: Reserved; item: Item }): Promise<void> {
    const s = this.session;
    h.item.ackIssued = true;
    h.item.ackDurable = 0;
    return h.r.ack().then(
      () => {
        if (s.dead) return;
        // A lazy ack's sync may have completed first: never lower what it recorded.
        h.item.ackDurable = Math.max(h.item.ackDurable, s.policy === 'none' || s.lazy ? 1 : 2) as Durability;
        if (h.item.ackDurable === 2) h.item.everAckedDurably = true;
      },
      (e: unknown) => {
        if (s.dead) return;
        if (this.onError(e, 'ack') === 'full') {
          // The ack was not recorded: the item is ready again.
          h.item.ackIssued = false;
          s.ready.add(h.item.seq!);
        }
      },
    );
  }

  async step(op: Op): Promise<void> {
    const s = this.session;
    switch (op.kind) {
      case 'push':
        await this.push([op.size], false);
        break;
      case 'pushMany':
        if (op.sizes.length > 0) await this.push(op.sizes, true);
        break;
      case 'burst': {
        const all: Promise<void>[] = [];
        for (let i = 0; i < op.pushes; i++) all.push(this.push([op.size + i], false));
        for (let i = 0; i < op.acks; i++) {
          const h = this.takeHeld(i);
          if (h !== null) all.push(this.ack(h));
        }
        await Promise.all(all);
        break;
      }
      case 'reserve':
        await this.reserve(op.count);
        break;
      case 'ack': {
        const h = this.takeHeld(op.pick);
        if (h !== null) await this.ack(h);
        break;
      }
      case 'nack':
      case 'drop': {
        const h = this.takeHeld(op.pick);
        if (h === null) break;
        try {
          if (op.kind === 'nack') await h.r.nack();
          else await h.r[Symbol.asyncDispose]();
          s.ready.add(h.r.seq);
        } catch (e) {
          this.onError(e, op.kind);
        }
        break;
      }
      case 'compact':
        try {
          await s.store.compact();
        } catch (e) {
          this.onError(e, 'compact');
        }
        break;
      case 'reopen':
        this.noteFaults();
        await this.reopen(op.policy);
        return;
      case 'crash': {
        const all: Promise<void>[] = [];
        for (let i = 0; i < op.inFlight; i++) {
          if (i % 3 === 2) {
            const h = this.takeHeld(i);
            if (h !== null) all.push(this.ack(h));
          } else all.push(this.push([i * 7], false));
        }
        for (let t = 0; t < op.ticks; t++) await new Promise<void>((r) => setImmediate(r));
        await this.crash(op.process, op.policy);
        return;
      }
      case 'eio':
        this.noteFaults(); // a rule that already fired is evidence: keep it before re-arming
        this.eio?.remove();
        this.eio = this.fs.inject({ op: ['fsync', 'fdatasync'], code: 'EIO', nth: op.nth });
        break;
      case 'emfile':
        this.noteFaults();
        this.emfile?.remove();
        this.emfile = this.fs.inject({ op: 'open', code: 'EMFILE', nth: op.nth });
        break;
      case 'enospc': {
        this.fs.setDiskBytesMax(this.fs.usedBytes() + op.slackBytes);
        this.diskFull = true;
        this.session.sawFault = true; // background work may hit ENOSPC too and fail the instance later
        for (let i = 0; i < op.pushes && !this.session.failed; i++) await this.push([op.size], false);
        this.fs.setDiskBytesMax(Infinity);
        if (this.session.failed) await this.recoverFromFailure();
        this.diskFull = false;
        // Space is back: a push must succeed now (after a reopen, if an armed EIO/EMFILE fired meanwhile).
        for (let attempt = 0; ; attempt++) {
          const before = this.model.nextId;
          await this.push([3], false);
          if (this.model.items.get(before)!.state === 'stored') break;
          if (!this.session.failed || attempt === 2) this.fail('a push after space returned did not succeed');
          await this.recoverFromFailure();
        }
        break;
      }
    }
    if (this.session.failed && !this.session.dead) await this.recoverFromFailure();
  }

  /** Phase 2: faults off, no crashes. Close cleanly, reopen, deliver everything, ack it, reopen: empty. */
  async drain(): Promise<void> {
    // A fault that fired unseen (a lazy ack's sync fails no operation, only the instance) still
    // explains the ERR_STORE_FAILED the close below may meet.
    this.noteFaults();
    this.fs.clearFaults();
    this.fs.setDiskBytesMax(Infinity);
    this.diskFull = false;
    this.eio = this.emfile = null;
    await this.reopen(this.session.policy);
    const s = this.session;
    const expected = [...s.ready].sort((a, b) => a - b);
    const acks: Promise<void>[] = [];
    for (;;) {
      let r: Reserved | null;
      try {
        r = await reserveSoon(s.rx);
      } catch (e) {
        this.fail(`drain: tryReserve threw ${(e as Error)?.message}`);
      }
      const min = s.ready.size === 0 ? null : Math.min(...s.ready);
      if (r === null) {
        if (min !== null) this.fail(`drain: liveness: seq ${min} was recovered but is never delivered`);
        break;
      }
      this.checkDelivery(r, min);
      s.ready.delete(r.seq);
      acks.push(this.ack({ r, item: s.bySeq.get(r.seq)! }));
    }
    await Promise.all(acks);
    if (s.failed) this.fail('drain: the queue failed without an injected fault');
    await this.reopen(s.policy);
    if (this.session.ready.size !== 0)
      this.fail(`drain: ${this.session.ready.size} items remain after everything (${expected.length}) was acked`);
    await this.session.tx.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Bit flips in synced data

export interface BitFlipResult {
  readonly outcome: 'open-corrupt' | 'open-unsupported' | 'read-corrupt' | 'undetected-harmless';
  readonly where: string;
}

/**
 * Runs `program`'s operations, closes cleanly (everything synced), flips one bit of one store
 * file (`pick` chooses file and offset), reopens and drains. The flip must surface as
 * `ERR_CORRUPT` (or `ERR_UNSUPPORTED_VERSION` when it hits the version field) on open or on
 * read. Items delivered before the damage is met must be exactly what was pushed, in order; when
 * the damage is never met (bytes that are never read), everything must be delivered.
 */
export async function runBitFlip(program: Program, pick: number, bit: number): Promise<BitFlipResult> {
  const runner = new Runner(program);
  try {
    await runner.runOps();
    runner.fs.clearFaults();
    runner.fs.setDiskBytesMax(Infinity);
    runner.diskFull = false;
    await runner.reopen(runner.session.policy);
    await runner.session.tx.close();
  } catch (e) {
    if (e instanceof Stop) return { outcome: 'undetected-harmless', where: 'run stopped (F5)' };
    throw e instanceof PropertyViolation ? e : new PropertyViolation(`unexpected exception: ${(e as Error)?.stack}`, runner.fs.reproLine());
  }
  const expected = [...runner.session.ready].sort((a, b) => a - b).map((seq) => runner.session.bySeq.get(seq)!);
  const fs = runner.fs;
  const files = fs.listFiles(DIR).filter((f) => fs.readFile(f).length > 0 && !f.includes('.torn'));
  if (files.length === 0) return { outcome: 'undetected-harmless', where: 'no file' };
  const file = files[pick % files.length]!;
  const size = fs.readFile(file).length;
  const offset = Math.floor(pick / files.length) % size;
  fs.flipBit(file, offset, bit & 7);
  const where = `${file}@${offset}.${bit & 7}`;
  const fail: (m: string) => never = (m) => {
    throw new PropertyViolation(`bit flip ${where}: ${m}`, fs.reproLine());
  };
  let store: LogStore;
  try {
    store = await LogStore.open(DIR, { ...runner.storeOptions, fs });
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ERR_CORRUPT') return { outcome: 'open-corrupt', where };
    if (code === 'ERR_UNSUPPORTED_VERSION') return { outcome: 'open-unsupported', where };
    fail(`open failed with ${(e as Error)?.name} ${code}, not ERR_CORRUPT: ${(e as Error)?.message}`);
  }
  let tx: Producer, rx: Consumer;
  try {
    [tx, rx] = await new Builder(store).durability('sync').ackDurability('sync').open();
  } catch (e) {
    fail(`Builder.open failed with ${(e as { code?: string }).code}: ${(e as Error)?.message}`);
  }
  let outcome: BitFlipResult['outcome'] = 'undetected-harmless';
  let index = 0;
  for (;;) {
    let r: Reserved | null;
    try {
      r = await reserveSoon(rx);
    } catch (e) {
      if (isQueueError(e, 'ERR_CORRUPT')) {
        outcome = 'read-corrupt';
        break;
      }
      fail(`read failed with ${(e as { code?: string }).code}, not ERR_CORRUPT: ${(e as Error)?.message}`);
    }
    if (r === null) break;
    const want = expected[index++];
    if (want === undefined) fail(`seq ${r.seq} delivered, but only ${expected.length} items were stored`);
    if (r.seq !== want.seq || !sameBytes(r.bytes, want.bytes)) {
      fail(`delivered seq ${r.seq} (${r.bytes.length} bytes), expected seq ${want.seq} with its pushed bytes: damage delivered as data`);
    }
  }
  if (outcome === 'undetected-harmless' && index !== expected.length) {
    fail(`${expected.length - index} stored items vanished without an error (first: seq ${expected[index]!.seq})`);
  }
  await tx.close().catch(() => undefined);
  return { outcome, where };
}
