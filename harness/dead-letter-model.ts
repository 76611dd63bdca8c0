/**
 * The crash model of delivery counts and the dead-letter queue: a seeded program of pushes,
 * reserves, acks, nacks (at once and with a delay), dropped reservations, `process()` with
 * failing handlers and retries, `item.deadLetter()`, `maxDeliveries`, redrives, purges, clean
 * reopens, and crashes (power loss at a random point, or a process crash, also in the middle of
 * `process()`), run over the real queue (Builder + LogStore on the simulated crash disk) under
 * `sync` and `group` durability with `sync`, `group` or `lazy` acks. Used by
 * test/crash/dead-letter-model.test.ts.
 *
 * The model learns what the queue asked of the store by watching the store's calls (append, ack,
 * markDelivered, deadLetter, dropDeadLetters, redrive, sync): for each, when it was issued and
 * when it resolved, with or without sync; an unsynced call is durable once a `sync()` that
 * started after it resolved has completed. Watching the store is stricter than watching the
 * user's promises, which resolve after the store's.
 *
 * Properties, checked at every recovery (the store's queue, its dead letters and its recovered
 * counts) and at every delivery:
 * - nothing appended and resolved is lost: each seq is in the queue or a dead letter, unless its
 *   ack or its purge was issued; nothing is invented, and bytes are exactly what was pushed;
 * - no seq is both in the queue and a dead letter, and no payload is held twice;
 * - a dead-letter move that resolved is never undone: the seq is not in the queue (so never
 *   delivered from it again), and is a dead letter unless its purge or redrive was issued;
 * - a redrive is all-or-nothing per item: the dead letter under its old seq, or the item in the
 *   queue under its new seq (or acked or moved again since), never both, never neither; one that
 *   resolved is done;
 * - an ack comes back only if it was not durable: under `sync`/`group` acks, only if its store
 *   call had not resolved; under `lazy`, only if no completed sync covered it (a process crash
 *   keeps every written ack); a purge likewise;
 * - delivery counts: marks and bounds are stored unsynced under every policy; an item is handed
 *   out for the n-th time only once the store holds a written record counting n, and never more
 *   than `maxDeliveries` times; in a session each hand-out counts exactly one more; a recovered
 *   count is at least what the item had after a process crash; a power loss may lose unsynced
 *   marks and bounds, so the count is then at least what the last completed sync held (a synced
 *   mark, or 1 below a synced bound); it is never more than the highest record ever written for
 *   it, nor more than one above what it had (an item resolved to a consumer whose handler had
 *   not started when the crash came counts the delivery it was given); after a clean close it
 *   is exact;
 * - every dead letter carries the count the queue held for the item when it was moved;
 * - liveness: after the program a clean reopen delivers everything, redrives every dead letter,
 *   delivers those, and a last reopen finds nothing left.
 */
import { Builder, type Consumer, type Producer, type Reserved } from '../src/core/builder.js';
import { LogStore, type LogStoreOptions } from '../src/stores/log/log-store.js';
import type { DeadLetter, StoreRecovery } from '../src/contract/store.js';
import { CrashFileSystem, type Prng } from '../src/testing/index.js';
import { PropertyViolation, payload, readAll } from './crash-model.js';

export type AckPolicy = 'sync' | 'group' | 'lazy';

export type DlqOp =
  | { readonly kind: 'push'; readonly count: number }
  | { readonly kind: 'reserve'; readonly count: number }
  | { readonly kind: 'ack'; readonly pick: number }
  | { readonly kind: 'nack'; readonly pick: number; readonly delayMs: number }
  | { readonly kind: 'deadLetter'; readonly pick: number }
  /** `Reserved[Symbol.asyncDispose]`: the reservation is dropped unsettled. */
  | { readonly kind: 'drop'; readonly pick: number }
  /** The (fake) clock moves on: delayed items come back. */
  | { readonly kind: 'tick'; readonly ms: number }
  /**
   * `rx.process()` until `handled` handler calls or nothing is left; a handler fails when
   * `(id * 7 + deliveries) % failMod === 0`. With `crashAt`, the `crashAt`-th handler call crashes.
   */
  | {
      readonly kind: 'process';
      readonly handled: number;
      readonly failMod: number;
      readonly concurrency: number;
      readonly crashAt: number;
      readonly power: boolean;
    }
  | { readonly kind: 'redrive'; readonly limit: number }
  | { readonly kind: 'purge'; readonly limit: number }
  | { readonly kind: 'reopen' }
  /** Power loss (or a process crash) with `inFlight` operations issued and not awaited, after `ticks` turns. */
  | { readonly kind: 'crash'; readonly power: boolean; readonly inFlight: number; readonly ticks: number };

export interface DlqProgram {
  readonly diskSeed: number;
  readonly durability: 'sync' | 'group';
  readonly acks: AckPolicy;
  /** Under lazy acks: a sync once this many acks wait (the delay bound never fires). */
  readonly lazyPending: number;
  readonly maxDeliveries: number;
  /** The fixed retry delay of process(). */
  readonly retryMs: number;
  readonly segmentBytes: number;
  readonly cursorCheckpointBytes: number;
  readonly autoCompact: boolean;
  readonly ops: readonly DlqOp[];
}

export interface DlqStats {
  crashes: number;
  recoveries: number;
  delivered: number;
  moved: number;
  redriven: number;
  purged: number;
  /** Items back after a crash although their ack's store call had resolved (lazy acks only). */
  lazyRedelivered: number;
  /** Recovered counts below what the item had (lazy acks, power loss only). */
  countsLowered: number;
  /** Recovered counts one above what the workload saw (an item resolved to a consumer whose handler had not started yet). */
  countsRaised: number;
}

export function randomDlqProgram(rnd: Prng, opCount: number): DlqProgram {
  const ops: DlqOp[] = [];
  for (let i = 0; i < opCount; i++) {
    const d = rnd.int(100);
    if (d < 14) ops.push({ kind: 'push', count: 1 + rnd.int(5) });
    else if (d < 30) ops.push({ kind: 'reserve', count: 1 + rnd.int(4) });
    else if (d < 40) ops.push({ kind: 'ack', pick: rnd.int(1000) });
    else if (d < 50) ops.push({ kind: 'nack', pick: rnd.int(1000), delayMs: rnd.bool(0.5) ? 0 : 1 + rnd.int(20) });
    else if (d < 55) ops.push({ kind: 'deadLetter', pick: rnd.int(1000) });
    else if (d < 58) ops.push({ kind: 'drop', pick: rnd.int(1000) });
    else if (d < 63) ops.push({ kind: 'tick', ms: 1 + rnd.int(25) });
    else if (d < 73) {
      const crash = rnd.bool(0.35);
      ops.push({
        kind: 'process',
        handled: 1 + rnd.int(12),
        failMod: 1 + rnd.int(3),
        concurrency: 1 + rnd.int(3),
        crashAt: crash ? 1 + rnd.int(8) : 0,
        power: rnd.bool(0.7),
      });
    } else if (d < 79) ops.push({ kind: 'redrive', limit: 1 + rnd.int(3) });
    else if (d < 82) ops.push({ kind: 'purge', limit: 1 + rnd.int(2) });
    else if (d < 86) ops.push({ kind: 'reopen' });
    else ops.push({ kind: 'crash', power: rnd.bool(0.7), inFlight: rnd.int(6), ticks: rnd.int(4) });
  }
  return {
    diskSeed: rnd.next() >>> 0,
    durability: rnd.pick(['sync', 'group'] as const),
    acks: rnd.pick(['sync', 'group', 'lazy', 'lazy'] as const),
    lazyPending: 1 + rnd.int(4),
    maxDeliveries: 2 + rnd.int(3),
    retryMs: rnd.bool(0.5) ? 0 : 1 + rnd.int(10),
    segmentBytes: 256 + rnd.int(1024),
    cursorCheckpointBytes: 32 + rnd.int(512),
    autoCompact: rnd.bool(0.7),
    ops,
  };
}

// ---------------------------------------------------------------------------------------------
// The model: what the store was asked, by seq

/** none → issued → written (resolved without sync) → synced (resolved with sync, or covered by a sync). */
type Level = 0 | 1 | 2 | 3;
const ISSUED = 1;
const WRITTEN = 2;
const SYNCED = 3;

interface SeqInfo {
  readonly seq: number;
  /** The payload's id (a redriven item keeps its dead letter's id under a new seq). */
  readonly id: number;
  readonly bytes: Uint8Array;
  /** Its append (or redrive) resolved: it was stored (durably: durability is sync or group). */
  stored: boolean;
  /** Held by the store as of the last recovery or since: in the queue, or as a dead letter. */
  where: 'queue' | 'dead' | 'gone';
  ack: Level;
  dead: Level;
  drop: Level;
  /** Its redrive: the new seq, and whether the move resolved. */
  redriveTo: number | undefined;
  redrive: Level;
  /** The count the queue holds for it now (what its next hand-out adds one to). */
  count: number;
  /** The count the disk held at the last recovery (durable from then on). */
  base: number;
  markIssued: number;
  markWritten: number;
  markSynced: number;
  /** Dead letter as the store was given it. */
  letter: DeadLetter | undefined;
}

type Ending = 'clean' | 'process' | 'power';

const DIR = '/data/dlq';

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function idOf(bytes: Uint8Array): number {
  return bytes.length < 4 ? -1 : new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0);
}

function letterText(l: DeadLetter): string {
  return JSON.stringify([l.seq, l.deliveries, l.firstDeliveredAt, l.lastDeliveredAt, l.deadAt, l.reason]);
}

const turn = (): Promise<void> => new Promise<void>((r) => setImmediate(r));

interface Session {
  readonly id: number;
  readonly store: LogStore;
  tx: Producer;
  rx: Consumer;
  dead: boolean;
  held: Reserved[];
  /** Seqs whose ack or dead-letter move was issued in this session: never handed out again in it. */
  settled: Set<number>;
  /** Store calls that resolved unsynced, waiting for a sync to cover them. */
  unsynced: (() => void)[];
}

/** How the test moves the fake clock (`vi.advanceTimersByTimeAsync`). */
export type Advance = (ms: number) => Promise<void>;

export async function runDlqProgram(program: DlqProgram, advance: Advance): Promise<DlqStats> {
  const runner = new DlqRunner(program, advance);
  try {
    await runner.run();
  } catch (e) {
    if (runner.violation) throw runner.violation;
    if (e instanceof PropertyViolation) throw e;
    throw new PropertyViolation(`unexpected exception: ${(e as Error)?.stack ?? String(e)}`, runner.fs.reproLine());
  }
  return runner.stats;
}

class DlqRunner {
  fs: CrashFileSystem;
  readonly stats: DlqStats = {
    crashes: 0,
    recoveries: 0,
    delivered: 0,
    moved: 0,
    redriven: 0,
    purged: 0,
    lazyRedelivered: 0,
    countsLowered: 0,
    countsRaised: 0,
  };
  readonly seqs = new Map<number, SeqInfo>();
  nextId = 1;
  session!: Session;
  sessions = 0;
  boundIssued = 1;
  boundWritten = 1;
  boundSynced = 1;
  readonly options: LogStoreOptions;
  /** A crash asked for from inside a handler; the process op performs it. */
  crashRequest: { power: boolean } | undefined;

  constructor(
    readonly program: DlqProgram,
    readonly advance: Advance,
  ) {
    this.fs = new CrashFileSystem({ seed: program.diskSeed });
    this.options = {
      segmentBytes: program.segmentBytes,
      cursorCheckpointBytes: program.cursorCheckpointBytes,
      autoCompact: program.autoCompact,
      preallocate: false,
      readAheadBytes: 128,
    };
  }

  /** The first broken property; a check inside a watched store call may be swallowed by the queue. */
  violation: PropertyViolation | undefined;

  fail(message: string): never {
    this.violation ??= new PropertyViolation(message, this.fs.reproLine());
    throw this.violation;
  }

  get lazy(): boolean {
    return this.program.acks === 'lazy';
  }

  async run(): Promise<void> {
    await this.open('clean', true);
    for (const op of this.program.ops) {
      await this.step(op);
      if (this.violation) throw this.violation;
    }
    await this.drain();
    if (this.violation) throw this.violation;
  }

  // ---- sessions and the store's calls

  async open(ending: Ending, first = false): Promise<void> {
    const store = await LogStore.open(DIR, { ...this.options, fs: this.fs }).catch((e: unknown) =>
      this.fail(`open after a ${ending} ending failed: ${(e as { code?: string }).code}: ${(e as Error).message}`),
    );
    const session: Session = {
      id: ++this.sessions,
      store,
      tx: undefined!,
      rx: undefined!,
      dead: false,
      held: [],
      settled: new Set(),
      unsynced: [],
    };
    this.watch(session, ending, first);
    const builder = new Builder(store)
      .durability(this.program.durability)
      .maxDeliveries(this.program.maxDeliveries)
      .retry({ kind: 'fixed', delayMs: this.program.retryMs });
    if (this.lazy) builder.ackDurability('lazy', { maxDelayMs: 2 ** 31 - 1, maxPending: this.program.lazyPending });
    else builder.ackDurability(this.program.acks);
    this.session = session;
    [session.tx, session.rx] = await builder.open().catch((e: unknown) => this.fail(`Builder.open failed: ${(e as Error).message}`));
  }

  /** Watch the store's calls; events of a session that crashed are ignored (they reached the old disk only). */
  watch(s: Session, ending: Ending, first: boolean): void {
    const store = s.store;
    const live = (): boolean => this.session === s && !s.dead;
    const redriving = new Set<number>();
    const durable = (flag: boolean, set: (level: Level) => void): void => {
      if (!live()) return;
      set(flag ? SYNCED : WRITTEN);
      if (!flag) s.unsynced.push(() => set(SYNCED));
    };
    const open = store.open.bind(store);
    store.open = () =>
      open().then((r) => {
        this.recovered(store, r, ending, first);
        return r;
      });
    const append = store.append.bind(store);
    store.append = (items, flag) => {
      if (!live()) return append(items, flag);
      if (process.env.PQ_DLQ_DEBUG) console.log(`s${s.id} append(${items.map((i) => i.seq)})`);
      // LogStore's redrive stores its items through its own append: those are the redrive's.
      if (items.every((it) => redriving.has(it.seq))) return append(items, flag);
      for (const it of items) this.created(it.seq, idOf(it.bytes), it.bytes);
      return append(items, flag).then(() => {
        if (!live()) return;
        if (!flag) this.fail('an append was stored without sync under sync/group durability');
        for (const it of items) this.info(it.seq).stored = true;
      });
    };
    const ack = store.ack.bind(store);
    store.ack = (seqs, flag) => {
      if (!live()) return ack(seqs, flag);
      if (flag === this.lazy) this.fail(`an ack was stored with sync ${flag} under ${this.program.acks} acks`);
      for (const seq of seqs) {
        const info = this.info(seq);
        if (info.where !== 'queue' || info.dead !== 0) this.fail(`ack of seq ${seq}, which is not an item in the queue`);
        info.ack = ISSUED;
      }
      return ack(seqs, flag).then(() =>
        durable(flag, (l) => {
          for (const seq of seqs) this.info(seq).ack = Math.max(this.info(seq).ack, l) as Level;
        }),
      );
    };
    const mark = store.markDelivered.bind(store);
    store.markDelivered = (below, marks, flag) => {
      if (!live()) return mark(below, marks, flag);
      if (process.env.PQ_DLQ_DEBUG)
        console.log(`s${s.id} markDelivered(${below}, ${JSON.stringify(marks.map((m) => [m.seq, m.deliveries]))}, ${flag})`);
      if (flag) this.fail(`a delivery mark was stored synced under ${this.program.acks} acks: marks are written, synced by the next sync`);
      this.boundIssued = Math.max(this.boundIssued, below);
      for (const m of marks) {
        const info = this.info(m.seq);
        info.markIssued = Math.max(info.markIssued, m.deliveries);
      }
      const stored = (): void =>
        durable(flag, (level) => {
          // A record synced later (by the next sync of the store) is no longer the last one
          // written when another bound was written since: only what is synced moves then.
          if (level === WRITTEN || flag) this.boundWritten = below;
          if (level === SYNCED) this.boundSynced = below;
          for (const m of marks) {
            const info = this.info(m.seq);
            if (level === SYNCED) info.markSynced = Math.max(info.markSynced, m.deliveries);
            info.markWritten = Math.max(info.markWritten, m.deliveries);
          }
        });
      const result = mark(below, marks, flag);
      // Finished synchronously: stored by the time the call returned, before any hand-out it allows.
      if (result === undefined) {
        stored();
        return undefined;
      }
      return result.then(stored);
    };
    const dead = store.deadLetter.bind(store);
    store.deadLetter = (letters) => {
      if (!live()) return dead(letters);
      for (const l of letters) {
        const info = this.info(l.seq);
        if (info.where !== 'queue' || info.ack !== 0 || info.dead !== 0)
          this.fail(`dead-letter move of seq ${l.seq}, which is not an unacked item in the queue`);
        if (!sameBytes(l.bytes, info.bytes)) this.fail(`dead letter ${l.seq} is given bytes other than the item's`);
        if (l.deliveries !== info.count)
          this.fail(`dead letter ${l.seq} carries ${l.deliveries} deliveries; the queue counted ${info.count}`);
        info.dead = ISSUED;
        info.letter = l;
        s.settled.add(l.seq);
      }
      return dead(letters).then(() => {
        if (!live()) return;
        this.stats.moved += letters.length;
        for (const l of letters) this.info(l.seq).dead = SYNCED;
      });
    };
    const drop = store.dropDeadLetters.bind(store);
    store.dropDeadLetters = (seqs, flag) => {
      if (!live()) return drop(seqs, flag);
      for (const seq of seqs) {
        const info = this.info(seq);
        if (info.dead === 0 || info.redrive !== 0) this.fail(`purge of seq ${seq}, which is not a dead letter`);
        info.drop = ISSUED;
      }
      return drop(seqs, flag).then(() =>
        durable(flag, (l) => {
          for (const seq of seqs) this.info(seq).drop = Math.max(this.info(seq).drop, l) as Level;
        }),
      );
    };
    const redrive = store.redrive.bind(store);
    store.redrive = (moves, flag) => {
      if (!live()) return redrive(moves, flag);
      if (process.env.PQ_DLQ_DEBUG) console.log(`s${s.id} redrive(${JSON.stringify(moves.map((m) => [m.from, m.item.seq]))})`);
      for (const m of moves) {
        const from = this.info(m.from);
        // The store lists a dead letter as soon as its move is written, before the move resolves:
        // a redrive or purge may take it then (the crash check judges the outcome on disk).
        if (from.dead === 0 || from.drop !== 0 || from.redrive !== 0)
          this.fail(
            `redrive of seq ${m.from}, which is not a dead letter (dead ${from.dead}, purge ${from.drop}, redrive ${from.redrive}, ${from.where})`,
          );
        if (!sameBytes(m.item.bytes, from.bytes)) this.fail(`redrive ${m.from} -> ${m.item.seq} with bytes other than the dead letter's`);
        from.redriveTo = m.item.seq;
        from.redrive = ISSUED;
        this.created(m.item.seq, from.id, from.bytes);
        redriving.add(m.item.seq);
      }
      return redrive(moves, flag).then(() => {
        for (const m of moves) redriving.delete(m.item.seq);
        if (!live()) return;
        if (!flag) this.fail('a redrive was stored without sync under sync/group durability');
        this.stats.redriven += moves.length;
        for (const m of moves) {
          this.info(m.from).redrive = SYNCED;
          this.info(m.item.seq).stored = true;
        }
      });
    };
    const sync = store.sync.bind(store);
    store.sync = () => {
      if (!live()) return sync();
      const covered = s.unsynced.splice(0);
      return sync().then(() => {
        if (live()) for (const f of covered) f();
      });
    };
  }

  info(seq: number): SeqInfo {
    const info = this.seqs.get(seq);
    if (info === undefined) this.fail(`the store was asked about seq ${seq}, which was never assigned`);
    return info;
  }

  /** A seq is assigned (append or redrive). It may reuse only a seq that never reached the disk. */
  created(seq: number, id: number, bytes: Uint8Array): void {
    const old = this.seqs.get(seq);
    if (old !== undefined && old.where !== 'gone') this.fail(`seq ${seq} is assigned again while it is held (id ${old.id})`);
    if (old?.stored) this.fail(`seq ${seq} is assigned again although it was stored once (id ${old.id})`);
    this.seqs.set(seq, {
      seq,
      id,
      bytes,
      stored: false,
      where: 'queue',
      ack: 0,
      dead: 0,
      drop: 0,
      redriveTo: undefined,
      redrive: 0,
      count: 0,
      base: 0,
      markIssued: 0,
      markWritten: 0,
      markSynced: 0,
      letter: undefined,
    });
  }

  // ---- the recovery check

  recovered(store: LogStore, r: StoreRecovery, ending: Ending, first: boolean): void {
    const queue = readAll(store);
    const dead = [...store.readDeadLetters({ after: 0, limit: 1e9 })];
    if (r.count !== queue.length) this.fail(`recovery counts ${r.count} items, ${queue.length} are readable`);
    if (r.deadLetters !== dead.length) this.fail(`recovery counts ${r.deadLetters} dead letters, ${dead.length} are readable`);
    if (first) {
      if (queue.length + dead.length > 0) this.fail('a fresh store holds something');
      return;
    }
    this.stats.recoveries++;
    const after = ending === 'clean' ? 'a clean close' : ending === 'process' ? 'a process crash' : 'a power loss';
    /** Survives this ending: a clean close and a process crash keep what was written, power loss only what was synced. */
    const kept = (level: Level): boolean => level >= (ending === 'power' ? SYNCED : WRITTEN);
    const inQueue = new Map(queue.map((i) => [i.seq, i.bytes]));
    const inDead = new Map(dead.map((d) => [d.seq, d]));
    const ids = new Map<number, number>();
    for (const [seq, bytes] of [...inQueue, ...[...inDead].map(([s, d]) => [s, d.bytes] as const)]) {
      const info = this.seqs.get(seq);
      if (info === undefined) this.fail(`after ${after}, seq ${seq} is held but was never assigned`);
      if (!sameBytes(info.bytes, bytes)) this.fail(`after ${after}, seq ${seq} holds other bytes than it was given`);
      if (ids.has(info.id)) this.fail(`after ${after}, payload id ${info.id} is held twice: seqs ${ids.get(info.id)} and ${seq}`);
      ids.set(info.id, seq);
    }
    for (const info of this.seqs.values()) {
      const seq = info.seq;
      if (info.where === 'gone') {
        if (inQueue.has(seq) || inDead.has(seq))
          this.fail(`after ${after}, seq ${seq} is back although it was gone at an earlier recovery`);
        continue;
      }
      const q = inQueue.has(seq);
      const d = inDead.has(seq);
      if (q && d) this.fail(`after ${after}, seq ${seq} is both in the queue and a dead letter`);
      if (q) {
        if (info.dead === SYNCED || info.where === 'dead')
          this.fail(`after ${after}, seq ${seq} is back in the queue although its move into the dead letters resolved`);
        if (kept(info.ack))
          this.fail(`after ${after}, seq ${seq} is back although its ack was ${info.ack === SYNCED ? 'synced' : 'written'}`);
        if (info.ack >= WRITTEN) this.stats.lazyRedelivered++;
      } else if (d) {
        if (info.dead === 0 && info.where !== 'dead') this.fail(`after ${after}, seq ${seq} is a dead letter but was never moved`);
        if (kept(info.drop))
          this.fail(`after ${after}, dead letter ${seq} is back although its purge was ${info.drop === SYNCED ? 'synced' : 'written'}`);
        if (info.redrive === SYNCED)
          this.fail(`after ${after}, dead letter ${seq} is back although its redrive to seq ${info.redriveTo} resolved`);
        const l = inDead.get(seq)!;
        if (info.letter !== undefined && letterText(l) !== letterText(info.letter)) {
          this.fail(`after ${after}, dead letter ${seq} is ${letterText(l)}, not the ${letterText(info.letter)} stored`);
        }
      } else {
        // Gone: allowed when it was never stored, or its ack or purge was issued, or it was redriven.
        const explained = !info.stored || info.ack !== 0 || info.drop !== 0 || (info.redriveTo !== undefined && info.redrive !== 0);
        if (!explained)
          this.fail(
            `after ${after}, seq ${seq} (id ${info.id}) is lost: stored, never acked, purged or redriven, yet neither in the queue nor a dead letter`,
          );
        if (info.dead === SYNCED && info.drop === 0 && info.redrive === 0)
          this.fail(`after ${after}, dead letter ${seq} is gone although it was never purged or redriven`);
      }
      if (info.redriveTo !== undefined && info.redrive !== 0) {
        const to = this.seqs.get(info.redriveTo)!;
        const toHeld = inQueue.has(to.seq) || inDead.has(to.seq);
        // The new item may be gone by its own ack or purge, or moved on by a redrive of its own.
        const accounted = (i: SeqInfo): boolean =>
          inQueue.has(i.seq) ||
          inDead.has(i.seq) ||
          i.ack !== 0 ||
          i.drop !== 0 ||
          (i.redriveTo !== undefined && i.redrive !== 0 && accounted(this.seqs.get(i.redriveTo)!));
        if (d && toHeld) this.fail(`after ${after}, redrive ${seq} -> ${to.seq} is in both places`);
        if (!d && !accounted(to)) this.fail(`after ${after}, redrive ${seq} -> ${to.seq} lost the item: in neither place`);
        if (d && to.stored) this.fail(`after ${after}, redrive ${seq} -> ${to.seq} resolved, but the dead letter is back`);
      }
    }
    // Delivery counts: what the queue will count for each item now (the ledger's adopt rule).
    const below = Math.min(r.deliveredBelow ?? 1, r.nextSeq);
    if (process.env.PQ_DLQ_DEBUG)
      console.log(
        `recovered after ${ending}: deliveredBelow ${r.deliveredBelow} nextSeq ${r.nextSeq} marks ${JSON.stringify(r.marks)} queue ${queue.map((i) => i.seq)} dead ${dead.map((d) => d.seq)}`,
      );
    const marks = new Map((r.marks ?? []).map((m) => [m.seq, m.deliveries]));
    // A store may report the bound cut to nextSeq: only seqs below nextSeq can be in it.
    const owed = Math.min(ending === 'power' ? this.boundSynced : this.boundWritten, r.nextSeq);
    if (ending !== 'clean' && below < owed)
      this.fail(`after ${after}, deliveredBelow ${r.deliveredBelow} is below the ${ending === 'power' ? 'synced' : 'written'} ${owed}`);
    for (const [seq] of inQueue) {
      const info = this.info(seq);
      const got = marks.get(seq) ?? (seq < below ? 1 : 0);
      const had = info.count;
      // What the disk must hold: every record written (or synced, for power loss under lazy acks).
      const low = ending === 'power' ? Math.max(info.base, info.markSynced, info.count > 0 && seq < this.boundSynced ? 1 : 0) : had;
      const high = Math.max(info.base, info.markIssued, seq < this.boundIssued ? 1 : 0);
      if (got < low) this.fail(`after ${after}, seq ${seq} recovers ${got} deliveries, below the ${low} it is owed (it had ${had})`);
      if (got > high) this.fail(`after ${after}, seq ${seq} recovers ${got} deliveries, more than any record written for it (${high})`);
      if (got > had + 1) this.fail(`after ${after}, seq ${seq} recovers ${got} deliveries, more than one above the ${had} it had`);
      if (ending === 'clean' && got !== had) this.fail(`after a clean close, seq ${seq} recovers ${got} deliveries, not the ${had} it had`);
      if (got < had) this.stats.countsLowered++;
      if (got > had) this.stats.countsRaised++;
      info.count = info.base = got;
      info.markIssued = info.markWritten = info.markSynced = got;
    }
    for (const m of r.marks ?? [])
      if (!inQueue.has(m.seq)) this.fail(`after ${after}, a mark is reported for seq ${m.seq}, which the queue does not hold`);
    // Adopt: what is held now is durable (the new disk starts with everything durable).
    for (const info of this.seqs.values()) {
      if (info.where === 'gone') continue;
      if (inQueue.has(info.seq)) {
        info.where = 'queue';
        info.stored = true;
        info.ack = info.dead = info.drop = info.redrive = 0;
        info.redriveTo = undefined;
        info.letter = undefined;
      } else if (inDead.has(info.seq)) {
        info.where = 'dead';
        info.stored = true;
        info.dead = SYNCED;
        info.drop = info.redrive = 0;
        info.redriveTo = undefined;
        info.letter = inDead.get(info.seq);
      } else info.where = 'gone';
    }
    this.boundIssued = this.boundWritten = this.boundSynced = r.deliveredBelow ?? 1;
  }

  // ---- deliveries

  /** A hand-out of `r` (by reserve, or to a process() handler) keeps every delivery rule. */
  delivered(r: Reserved): void {
    const s = this.session;
    this.stats.delivered++;
    const info = this.seqs.get(r.seq);
    if (info === undefined || info.where !== 'queue') this.fail(`delivered seq ${r.seq}, which is not an item in the queue`);
    if (s.settled.has(r.seq)) this.fail(`delivered seq ${r.seq} again after its ack or dead-letter move was issued`);
    if (!sameBytes(r.bytes, info.bytes)) this.fail(`delivered seq ${r.seq} with other bytes than it was given`);
    const n = r.deliveries;
    if (n !== info.count + 1) this.fail(`seq ${r.seq} handed out as delivery ${n}; the queue counted ${info.count} before`);
    if (n > this.program.maxDeliveries)
      this.fail(`seq ${r.seq} handed out ${n} times, more than maxDeliveries ${this.program.maxDeliveries}`);
    // The record counting this delivery was written before the hand-out (synced later).
    const record = Math.max(info.markWritten, info.base);
    const bound = this.boundWritten;
    if (!(record >= n || (n === 1 && r.seq < bound)))
      this.fail(`seq ${r.seq} handed out for the ${n}-th time before the store held a record counting it`);
    info.count = n;
  }

  take(pick: number): Reserved | undefined {
    const held = this.session.held;
    if (held.length === 0) return undefined;
    return held.splice(pick % held.length, 1)[0];
  }

  /** An operation the workload awaits: a rejection breaks a property unless the session crashed meanwhile. */
  async expectOk<T>(what: string, p: Promise<T>): Promise<T | undefined> {
    const s = this.session;
    try {
      return await p;
    } catch (e) {
      if (this.violation) throw this.violation;
      if (s.dead) return undefined;
      this.fail(`${what} rejected: ${(e as { code?: string }).code}: ${(e as Error).message}`);
    }
  }

  settle(kind: 'ack' | 'nack' | 'deadLetter' | 'drop', r: Reserved, delayMs = 0): Promise<unknown> {
    const s = this.session;
    if (kind === 'ack' || kind === 'deadLetter') s.settled.add(r.seq);
    if (kind === 'ack') return this.expectOk('ack', r.ack());
    if (kind === 'nack') return this.expectOk('nack', r.nack(delayMs === 0 ? undefined : { delayMs }));
    if (kind === 'deadLetter') return this.expectOk('deadLetter', r.deadLetter(`dead ${r.seq}`));
    return this.expectOk('dispose', r[Symbol.asyncDispose]());
  }

  reserve(count: number): void {
    const s = this.session;
    for (let i = 0; i < count; i++) {
      let r: Reserved | null;
      try {
        r = s.rx.tryReserve();
      } catch (e) {
        this.fail(`tryReserve threw: ${(e as Error).message}`);
      }
      if (r === null) return;
      this.delivered(r);
      s.held.push(r);
    }
  }

  pushItems(count: number): Promise<unknown> {
    const payloads = Array.from({ length: count }, () => {
      const id = this.nextId++;
      return payload(id, id % 23);
    });
    return this.expectOk('push', this.session.tx.pushMany(payloads));
  }

  async step(op: DlqOp): Promise<void> {
    const s = this.session;
    if (process.env.PQ_DLQ_DEBUG) console.log(`s${s.id} ${JSON.stringify(op)}`);
    switch (op.kind) {
      case 'push':
        await this.pushItems(op.count);
        break;
      case 'reserve':
        this.reserve(op.count);
        break;
      case 'ack':
      case 'deadLetter':
      case 'drop': {
        const r = this.take(op.pick);
        if (r !== undefined) await this.settle(op.kind, r);
        break;
      }
      case 'nack': {
        const r = this.take(op.pick);
        if (r !== undefined) await this.settle('nack', r, op.delayMs);
        break;
      }
      case 'tick':
        await this.advance(op.ms);
        break;
      case 'process':
        await this.process(op);
        break;
      case 'redrive': {
        const seqs = await this.expectOk('redrive', s.rx.deadLetters.redrive({ limit: op.limit }));
        if (seqs !== undefined && !s.dead)
          for (const seq of seqs) if (!this.info(seq).stored) this.fail(`redrive resolved with seq ${seq}, which is not stored`);
        break;
      }
      case 'purge': {
        const count = await this.expectOk('purge', s.rx.deadLetters.purge({ limit: op.limit }));
        this.stats.purged += count ?? 0;
        break;
      }
      case 'reopen':
        await this.reopen();
        break;
      case 'crash': {
        // Operations in flight when the crash comes: never awaited.
        for (let i = 0; i < op.inFlight; i++) {
          const r = this.take(i);
          if (i % 3 === 0 || r === undefined) void this.pushItems(1);
          else void this.settle((['ack', 'nack', 'deadLetter'] as const)[i % 3], r, i % 2 === 0 ? 0 : 5);
        }
        for (let t = 0; t < op.ticks; t++) await turn();
        await this.crash(op.power);
        break;
      }
    }
  }

  async process(op: Extract<DlqOp, { kind: 'process' }>): Promise<void> {
    const s = this.session;
    const stop = new AbortController();
    let calls = 0;
    const running = s.rx
      .process(
        async (item) => {
          if (s.dead) return new Promise<void>(() => {});
          this.delivered(item);
          calls++;
          if (calls === op.crashAt) {
            // The handler's process dies: this handler never returns.
            this.crashRequest = { power: op.power };
            return new Promise<void>(() => {});
          }
          if (calls >= op.handled) stop.abort();
          if ((idOf(item.bytes) * 7 + item.deliveries) % op.failMod === 0) throw new Error(`handler failed on ${item.seq}`);
          // A successful handler's item is acked by process() once it returns.
          s.settled.add(item.seq);
        },
        { concurrency: op.concurrency, signal: stop.signal },
      )
      .catch((e: unknown) => {
        if (!s.dead) this.fail(`process() rejected: ${(e as Error).message}`);
      });
    // Run until the handler count, a crash, or nothing left to do; retries wait on the fake clock.
    for (let i = 0; i < 2000 && !stop.signal.aborted; i++) {
      await turn();
      if (this.crashRequest !== undefined) {
        const { power } = this.crashRequest;
        this.crashRequest = undefined;
        await this.crash(power);
        return;
      }
      const st = s.rx.stats();
      if (st.inFlight === 0 && st.ready === 0 && st.pendingAcks === 0) {
        if (st.delayed === 0) break;
        await this.advance(Math.max(1, this.program.retryMs));
      }
    }
    stop.abort();
    if (this.crashRequest !== undefined) {
      // The crashing handler never returns: the crash comes now.
      const { power } = this.crashRequest;
      this.crashRequest = undefined;
      await this.crash(power);
      return;
    }
    await running;
  }

  async reopen(): Promise<void> {
    const s = this.session;
    s.held = [];
    try {
      await s.tx.close();
    } catch (e) {
      this.fail(`close failed: ${(e as Error).message}`);
    }
    s.dead = true;
    await this.open('clean');
  }

  async crash(power: boolean): Promise<void> {
    this.session.dead = true;
    this.stats.crashes++;
    this.fs = power ? this.fs.crash() : this.fs.processCrash();
    await this.open(power ? 'power' : 'process');
  }

  /** After the program: everything left is delivered and acked, every dead letter redriven and acked. */
  async drain(): Promise<void> {
    for (let round = 0; round < 2; round++) {
      await this.reopen();
      const s = this.session;
      for (let i = 0; i < 10_000; i++) {
        const r = s.rx.tryReserve();
        if (r !== null) {
          this.delivered(r);
          await this.settle('ack', r);
          continue;
        }
        const st = s.rx.stats();
        if (st.ready === 0 && st.pendingAcks === 0 && st.delayed === 0) break;
        await turn();
      }
      await this.expectOk('onIdle', s.rx.onIdle());
      if (round === 0) await this.expectOk('redrive', s.rx.deadLetters.redrive());
    }
    await this.reopen();
    const st = this.session.rx.stats();
    if (st.ready !== 0 || st.deadLetters !== 0) this.fail(`after the drain ${st.ready} items and ${st.deadLetters} dead letters are left`);
    await this.session.tx.close();
  }
}
