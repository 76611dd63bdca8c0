/**
 * Exhaustive crash points over delivery marks and the dead-letter queue: each fixed workload runs
 * once on the simulated crash disk, recording for every operation the trace length when it was
 * issued and when it resolved; then every crash point of the trace (every prefix, every torn
 * length of the last write, the F3 zero tails) is recovered and checked:
 * - the store opens (a tolerated crash state is never ERR_CORRUPT);
 * - queue items and dead letters hold exactly the bytes they were stored with;
 * - no seq is both in the queue and a dead letter;
 * - nothing appended and resolved is lost: each such item is in the queue, or a dead letter, or an
 *   ack, dead-lettering or drop of it was issued before the crash point;
 * - a resolved deadLetter is never undone: the item is a dead letter (unless dropped or redriven
 *   since) and not in the queue;
 * - a redrive is all-or-nothing per move: the dead letter is held and the new seq stored nowhere,
 *   or the dead letter is gone and the new item is in the queue (or was acked); a resolved synced one
 *   is done (an unsynced one may be undone by power loss, as an unsynced append may be lost);
 * - a resolved synced mark of an item still in the queue is reported (or a later one of it);
 * - no seq is reused: nextSeq is above every seq the store holds or that was durably stored;
 * - the recovered store works, and a void redrive never applies to the item that gets its seq:
 *   one more append, a clean close and a reopen keep exactly the same queue and dead letters.
 * Deterministic: no randomness at all.
 */
import { describe, expect, it } from 'vitest';
import { readAll } from '../../harness/crash-model.js';
import { LogStore, type LogStoreOptions } from '../../src/stores/log/log-store.js';
import type { DeadLetter, DeliveryMark } from '../../src/contract/store.js';
import { CrashFileSystem, type CrashPoint, formatCrashPoint } from '../../src/testing/index.js';

const DIR = '/q';

function bytesFor(seq: number, size: number): Uint8Array {
  const b = new Uint8Array(size);
  for (let i = 0; i < size; i++) b[i] = (seq * 31 + i * 7) & 0xff;
  return b;
}

function deadOf(seq: number, bytes: Uint8Array, reason: string): DeadLetter {
  return { seq, bytes, deliveries: 2, firstDeliveredAt: 1000 + seq, lastDeliveredAt: 2000 + seq, deadAt: 3000 + seq, reason };
}

function markOf(seq: number, deliveries: number, lastError = ''): DeliveryMark {
  return { seq, deliveries, firstDeliveredAt: 100 + seq, lastDeliveredAt: 200 + seq + deliveries, lastError };
}

type Event =
  | { kind: 'append'; seqs: number[] }
  | { kind: 'ack'; seqs: number[] }
  | { kind: 'mark'; marks: DeliveryMark[]; sync: boolean }
  | { kind: 'dead'; seqs: number[] }
  | { kind: 'drop'; seqs: number[] }
  | { kind: 'redrive'; moves: { from: number; seq: number }[]; sync: boolean };

interface Logged {
  readonly event: Event;
  readonly issuedAt: number;
  /** Trace length when it resolved; Infinity for a call that settles after the workload. */
  resolvedAt: number;
}

interface Ops {
  append(seqs: number[], size: number, sync?: boolean): Promise<void>;
  ack(seqs: number[]): Promise<void>;
  mark(below: number, marks: DeliveryMark[], sync: boolean): Promise<void>;
  dead(seqs: number[], reason: string): Promise<void>;
  drop(seqs: number[], sync: boolean): Promise<void>;
  redrive(from: number[], sync: boolean): Promise<void>;
}

interface Recorded {
  fs: CrashFileSystem;
  from: number;
  options: LogStoreOptions;
  /** Bytes of every seq ever stored (redriven seqs get their dead letter's bytes). */
  bytes: Map<number, Uint8Array>;
  log: Logged[];
}

async function record(options: LogStoreOptions, body: (ops: Ops) => Promise<void>): Promise<Recorded> {
  const fs = new CrashFileSystem({ seed: 1 });
  const store = await LogStore.open(DIR, { ...options, fs });
  const { nextSeq: first } = await store.open();
  const rec: Recorded = { fs, from: fs.traceLength, options, bytes: new Map(), log: [] };
  let next = first;
  const run = async (event: Event, call: () => Promise<void>): Promise<void> => {
    const entry: Logged = { event, issuedAt: fs.traceLength, resolvedAt: Infinity };
    rec.log.push(entry);
    await call();
    entry.resolvedAt = fs.traceLength;
  };
  await body({
    append: (seqs, size, sync = true) => {
      expect(seqs[0]).toBe(next);
      next += seqs.length;
      const items = seqs.map((seq) => ({ seq, bytes: bytesFor(seq, size) }));
      for (const it of items) rec.bytes.set(it.seq, it.bytes);
      return run({ kind: 'append', seqs }, () => store.append(items, sync));
    },
    ack: (seqs) => run({ kind: 'ack', seqs }, () => store.ack(seqs, true)),
    mark: (below, marks, sync) => run({ kind: 'mark', marks, sync }, async () => store.markDelivered(below, marks, sync)),
    dead: (seqs, reason) =>
      run({ kind: 'dead', seqs }, () => store.deadLetter(seqs.map((s) => deadOf(s, rec.bytes.get(s)!, `${reason}${s}`)))),
    drop: (seqs, sync) => run({ kind: 'drop', seqs }, () => store.dropDeadLetters(seqs, sync)),
    redrive: (from, sync) => {
      const moves = from.map((f, i) => ({ from: f, seq: next + i }));
      next += from.length;
      for (const m of moves) rec.bytes.set(m.seq, rec.bytes.get(m.from)!);
      return run({ kind: 'redrive', moves, sync }, () =>
        store.redrive(
          moves.map((m) => ({ from: m.from, item: { seq: m.seq, bytes: rec.bytes.get(m.from)! } })),
          sync,
        ),
      );
    },
  });
  await store.settled();
  // The clean close belongs to the workload too: its checkpoint is a crash point.
  await store.close();
  return rec;
}

function readDead(store: LogStore): DeadLetter[] {
  return [...store.readDeadLetters({ after: 0, limit: 1e9 })];
}

async function checkPoint(rec: Recorded, point: CrashPoint): Promise<void> {
  const fs = rec.fs.crashAt(point);
  const where = `crash point ${formatCrashPoint(point)} (${rec.fs.reproLine()})`;
  let store: LogStore;
  try {
    store = await LogStore.open(DIR, { ...rec.options, fs });
  } catch (e) {
    throw new Error(`${where}: open failed: ${(e as { code?: string }).code}: ${(e as Error).message}`);
  }
  const r = await store.open();
  const queue = readAll(store);
  const dead = readDead(store);
  expect(r.count, `${where}: count`).toBe(queue.length);
  expect(r.deadLetters, `${where}: dead-letter count`).toBe(dead.length);
  const inQueue = new Map(queue.map((i) => [i.seq, i.bytes]));
  const inDead = new Map(dead.map((d) => [d.seq, d]));
  for (const [seq, bytes] of inQueue) {
    expect(rec.bytes.has(seq), `${where}: seq ${seq} was never stored`).toBe(true);
    expect(Buffer.from(bytes).equals(Buffer.from(rec.bytes.get(seq)!)), `${where}: bytes of seq ${seq}`).toBe(true);
    expect(inDead.has(seq), `${where}: seq ${seq} is both in the queue and a dead letter`).toBe(false);
  }
  for (const [seq, d] of inDead) {
    expect(Buffer.from(d.bytes).equals(Buffer.from(rec.bytes.get(seq)!)), `${where}: bytes of dead letter ${seq}`).toBe(true);
    expect(d.reason.endsWith(String(seq)), `${where}: reason of dead letter ${seq}`).toBe(true);
  }
  const issuedBefore = (kind: Event['kind'], seq: number): boolean =>
    rec.log.some((l) => l.issuedAt < point.at && l.event.kind === kind && 'seqs' in l.event && l.event.seqs.includes(seq));
  const redriveOf = (from: number): { from: number; seq: number; logged: Logged } | undefined => {
    for (const l of rec.log) if (l.event.kind === 'redrive') for (const m of l.event.moves) if (m.from === from) return { ...m, logged: l };
    return undefined;
  };
  const ackedBefore = (seq: number): boolean => issuedBefore('ack', seq);
  for (const l of rec.log) {
    const e = l.event;
    if (e.kind === 'append' && l.resolvedAt <= point.at) {
      for (const s of e.seqs) {
        const accounted = inQueue.has(s) || inDead.has(s) || ackedBefore(s) || issuedBefore('dead', s);
        expect(accounted, `${where}: seq ${s} was appended durably but is lost`).toBe(true);
      }
    }
    if (e.kind === 'ack' && l.resolvedAt <= point.at)
      for (const s of e.seqs) expect(inQueue.has(s), `${where}: acked seq ${s} came back`).toBe(false);
    if (e.kind === 'dead' && l.resolvedAt <= point.at) {
      for (const s of e.seqs) {
        expect(inQueue.has(s), `${where}: dead-lettered seq ${s} is back in the queue`).toBe(false);
        const gone = issuedBefore('drop', s) || (redriveOf(s)?.logged.issuedAt ?? Infinity) < point.at;
        expect(inDead.has(s) || gone, `${where}: resolved dead letter ${s} was undone`).toBe(true);
      }
    }
    if (e.kind === 'drop' && l.resolvedAt <= point.at)
      for (const s of e.seqs) expect(inDead.has(s), `${where}: dropped dead letter ${s} came back`).toBe(false);
    if (e.kind === 'redrive' && l.issuedAt < point.at) {
      for (const m of e.moves) {
        const done = !inDead.has(m.from);
        if (done)
          expect(
            inQueue.has(m.seq) || ackedBefore(m.seq) || issuedBefore('dead', m.seq),
            `${where}: redrive ${m.from} -> ${m.seq} lost both`,
          ).toBe(true);
        else expect(inQueue.has(m.seq) || inDead.has(m.seq), `${where}: redrive ${m.from} -> ${m.seq} is in both places`).toBe(false);
        if (e.sync && l.resolvedAt <= point.at)
          expect(done, `${where}: resolved synced redrive ${m.from} -> ${m.seq} was undone`).toBe(true);
      }
    }
    if (e.kind === 'mark' && e.sync && l.resolvedAt <= point.at) {
      for (const m of e.marks) {
        if (!inQueue.has(m.seq)) continue;
        const got = r.marks!.find((x) => x.seq === m.seq);
        const later = rec.log
          .filter((x) => x.issuedAt < point.at && x.event.kind === 'mark')
          .flatMap((x) => (x.event as { marks: DeliveryMark[] }).marks)
          .filter((x) => x.seq === m.seq);
        expect(
          got !== undefined && later.some((x) => JSON.stringify(x) === JSON.stringify(got)),
          `${where}: synced mark of seq ${m.seq} is missing or unknown`,
        ).toBe(true);
      }
    }
  }
  for (const m of r.marks!)
    expect(inQueue.has(m.seq), `${where}: a mark is reported for seq ${m.seq}, which the queue does not hold`).toBe(true);
  const held = [...inQueue.keys(), ...inDead.keys()];
  for (const s of held) expect(r.nextSeq, `${where}: nextSeq ${r.nextSeq} would reuse seq ${s}`).toBeGreaterThan(s);
  for (const l of rec.log) {
    if (l.resolvedAt > point.at) continue;
    const seqs =
      l.event.kind === 'redrive' ? (l.event.sync ? l.event.moves.map((m) => m.seq) : []) : l.event.kind === 'append' ? l.event.seqs : [];
    for (const s of seqs) expect(r.nextSeq, `${where}: nextSeq ${r.nextSeq} reuses durably stored seq ${s}`).toBeGreaterThan(s);
  }
  // The recovered store works; the item that may take a void redrive's seq stays an item.
  const extra = { seq: r.nextSeq, bytes: bytesFor(r.nextSeq, 9) };
  await store.append([extra], true);
  await store.close();
  const again = await LogStore.open(DIR, { ...rec.options, fs });
  await again.open();
  expect(
    readAll(again).map((i) => i.seq),
    `${where}: queue after recovery and reopen`,
  ).toEqual([...queue.map((i) => i.seq), extra.seq]);
  expect(
    readDead(again).map((d) => d.seq),
    `${where}: dead letters after recovery and reopen`,
  ).toEqual(dead.map((d) => d.seq));
  await again.close();
}

async function explore(name: string, rec: Recorded): Promise<number> {
  let states = 0;
  for (const point of rec.fs.crashPoints({ from: rec.from, zeroTail: true })) {
    await checkPoint(rec, point);
    states++;
  }
  console.log(`[exhaustive] ${name}: ${states} crash states explored over a ${rec.fs.traceLength - rec.from}-entry trace`);
  expect(states).toBeGreaterThan(rec.fs.traceLength - rec.from);
  return states;
}

describe('exhaustive crash points: delivery marks and dead letters', () => {
  it('marks, dead letters, a drop and redrives, from a version-1 cursor on', async () => {
    const rec = await record({ segmentBytes: 4096, preallocate: false, autoCompact: false }, async (ops) => {
      await ops.append([1, 2, 3, 4], 10);
      await ops.mark(3, [markOf(1, 1), markOf(2, 1, 'e')], true);
      await ops.dead([2], 'poison');
      await ops.ack([1]);
      await ops.mark(5, [markOf(3, 2, 'x')], false);
      await ops.dead([4, 3], 'r');
      await ops.redrive([2], true);
      await ops.drop([3], true);
      await ops.redrive([4], false);
      await ops.append([7], 10);
    });
    await explore('marks, dead letters, a drop and redrives', rec);
  });

  it('a redrive across a segment roll, and checkpoints that carry dead letters', async () => {
    const rec = await record({ segmentBytes: 256, preallocate: false, autoCompact: true, cursorCheckpointBytes: 64 }, async (ops) => {
      await ops.append([1, 2, 3], 40);
      await ops.dead([1, 2], 'd');
      await ops.append([4, 5], 40);
      await ops.ack([3, 4]);
      await ops.redrive([1, 2], true);
      await ops.ack([5, 6]);
    });
    await explore('a redrive across a segment roll', rec);
  });
});
