/**
 * A roll in flight, parked between sealing the active segment and the durable creation of the
 * next one (the new file's fsync is held by the test), while the last acks of the sealed segment
 * arrive and maintenance runs: `sync()` (the lazy acks' sync), `inspect()`, `usage()`,
 * `payloadBytes()` and `read()` must all work there, and the sealed segment must stay until the
 * roll is done. Then every crash point of that run is recovered: the store opens, no pushed and
 * resolved item is lost, and an ack covered by a completed `sync()` (the one issued mid-roll
 * included) never comes back.
 * Found by a 64-producer run with lazy acks: maintenance deleted the fully acked sealed segment
 * mid-roll, the segment list was empty, and the lazy acks' `sync()` failed the store on it.
 */
import { describe, expect, test } from 'vitest';
import { basename } from 'node:path';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES } from '../../../src/stores/log/engine/format.js';
import { CrashFileSystem, ManualClock, formatCrashPoint, type CrashPoint } from '../../../src/testing/index.js';
import { readAll } from '../../../harness/crash-model.js';
import { WrappedFs } from './helpers.js';

const DIR = '/q';
const SEGMENT_BYTES = 256;
const PAYLOAD_BYTES = 40;
/** Items that fit one segment: the next one rolls. */
const PER_SEGMENT = Math.floor((SEGMENT_BYTES - SEGMENT_HEADER_BYTES) / (FRAME_HEADER_BYTES + PAYLOAD_BYTES));
const SEGMENT_FILE = /^seg-\d{20}\.log$/;

/**
 * Holds the fsync of the next segment file a roll creates (its header, before the directory
 * fsync) until `release()`: the roll is parked with the old segment sealed and the new one not
 * yet in the layout. The disk sees the fsync only at the release (a device that had not written
 * the header yet), so crash points taken meanwhile keep the new file's header unsynced.
 */
class RollParkingFs extends WrappedFs {
  readonly #created = new Set<number>();
  #armed: (() => void) | null = null;
  #release: (() => void) | null = null;

  /** Resolves once a roll is parked. */
  parkNextCreation(): Promise<void> {
    return new Promise((resolve) => (this.#armed = resolve));
  }

  release(): void {
    this.#release?.();
    this.#release = null;
  }

  override open(p: string, mode: 'read' | 'readWrite' | 'create', fileMode?: number): number {
    const fd = super.open(p, mode, fileMode);
    if (mode === 'create' && SEGMENT_FILE.test(basename(p))) this.#created.add(fd);
    return fd;
  }

  override fsync(fd: number): Promise<void> {
    const parked = this.#armed;
    if (parked === null || !this.#created.delete(fd)) return super.fsync(fd);
    this.#armed = null;
    const held = new Promise<void>((resolve) => (this.#release = resolve));
    parked();
    return held.then(() => super.fsync(fd));
  }
}

const item = (seq: number) => ({ seq, bytes: new Uint8Array(PAYLOAD_BYTES).fill(seq) });

interface Run {
  fs: CrashFileSystem;
  /** Trace length once the store is open: crash points start here. */
  from: number;
  /** seq -> trace length when its append resolved. */
  appendedAt: Map<number, number>;
  /** seq -> trace length when its ack was issued. */
  ackIssuedAt: Map<number, number>;
  /** seq -> trace length when a sync covering its ack completed. */
  ackSyncedAt: Map<number, number>;
}

/**
 * Fill a segment and ack all of it but the last item (durably); start the append that rolls,
 * park the roll, ack that last item lazily (which leaves the sealed segment fully acked and
 * starts maintenance), let maintenance settle, `sync()` and look at the store, all mid-roll.
 */
async function runRollWithMidRollSync(): Promise<Run> {
  const fs = new CrashFileSystem({ seed: 1 });
  const parking = new RollParkingFs(fs);
  const store = await LogStore.open(DIR, { fs: parking, segmentBytes: SEGMENT_BYTES, preallocate: false, clock: new ManualClock() });
  await store.open();
  const run: Run = { fs, from: fs.traceLength, appendedAt: new Map(), ackIssuedAt: new Map(), ackSyncedAt: new Map() };
  for (let seq = 1; seq <= PER_SEGMENT; seq++) {
    await store.append([item(seq)], true);
    run.appendedAt.set(seq, fs.traceLength);
  }
  const early = Array.from({ length: PER_SEGMENT - 1 }, (_, i) => i + 1);
  for (const seq of early) run.ackIssuedAt.set(seq, fs.traceLength);
  await store.ack(early, true);
  for (const seq of early) run.ackSyncedAt.set(seq, fs.traceLength);

  const parked = parking.parkNextCreation();
  const rolling = PER_SEGMENT + 1;
  const appended = store.append([item(rolling)], true);
  await parked;
  run.ackIssuedAt.set(PER_SEGMENT, fs.traceLength);
  await store.ack([PER_SEGMENT], false);
  await store.settled();

  // The lazy acks' sync, while the roll is still parked: it does not wait for the roll.
  await store.sync();
  run.ackSyncedAt.set(PER_SEGMENT, fs.traceLength);

  const midRoll = store.inspect();
  expect(
    midRoll.segments.map((s) => [s.baseSeq, s.sealed, s.compacted]),
    'the sealed segment stays while the roll is in flight',
  ).toEqual([[1, true, false]]);
  expect(midRoll.count).toBe(0);
  expect(midRoll.nextSeq).toBe(rolling);
  expect(midRoll.bytesOnDisk).toBeGreaterThan(midRoll.segments[0]!.bytes);
  expect(store.usage().segments).toBe(1);
  expect(store.payloadBytes()).toBe(midRoll.segments[0]!.bytes - SEGMENT_HEADER_BYTES);
  expect(store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 100 })).toEqual([]);

  parking.release();
  await appended;
  run.appendedAt.set(rolling, fs.traceLength);
  await store.settled();
  expect(
    store.inspect().segments.map((s) => [s.baseSeq, s.sealed]),
    'once the next segment exists, the acked one is deleted',
  ).toEqual([[rolling, false]]);
  expect(store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 100 }).map((i) => i.seq)).toEqual([rolling]);
  await store.close();
  return run;
}

async function checkCrashPoint(run: Run, point: CrashPoint): Promise<void> {
  const where = `crash point ${formatCrashPoint(point)} (${run.fs.reproLine()})`;
  const store = await LogStore.open(DIR, {
    fs: run.fs.crashAt(point),
    segmentBytes: SEGMENT_BYTES,
    preallocate: false,
    clock: new ManualClock(),
  }).catch((e: unknown) => {
    throw new Error(`${where}: the store does not open: ${(e as Error).message}`);
  });
  await store.open();
  expect(store.recovery.nextSeqRaisedFrom, `${where}: next seq raised`).toBe(null);
  const present = new Set<number>();
  for (const it of readAll(store)) {
    expect([...it.bytes], `${where}: bytes of seq ${it.seq}`).toEqual([...item(it.seq).bytes]);
    const syncedAt = run.ackSyncedAt.get(it.seq);
    expect(
      syncedAt !== undefined && syncedAt <= point.at,
      `${where}: seq ${it.seq} came back although a completed sync covered its ack`,
    ).toBe(false);
    present.add(it.seq);
  }
  for (const [seq, at] of run.appendedAt) {
    if (at > point.at || present.has(seq)) continue;
    const issuedAt = run.ackIssuedAt.get(seq);
    expect(issuedAt !== undefined && issuedAt < point.at, `${where}: seq ${seq} was appended and resolved, not acked, but is missing`).toBe(
      true,
    );
  }
  await store.close();
}

describe('sync and inspection while a roll is in flight', () => {
  test('syncDuringARollWhoseSealedSegmentIsFullyAckedResolvesAndTheSegmentGoesOnlyAfterTheRoll', async () => {
    const run = await runRollWithMidRollSync();
    expect(run.ackSyncedAt.size).toBe(PER_SEGMENT);
  });

  test('anAckCoveredByASyncIssuedMidRollSurvivesEveryCrashPointAndEveryPointOpens', async () => {
    const run = await runRollWithMidRollSync();
    let states = 0;
    // Only what was synced survives, at every point; then every point with the last write kept, lost or torn.
    for (let at = run.from; at <= run.fs.traceLength; at++) {
      await checkCrashPoint(run, { at, keep: run.from });
      states++;
    }
    for (const point of run.fs.crashPoints({ from: run.from, zeroTail: true })) {
      await checkCrashPoint(run, point);
      states++;
    }
    console.log(`[sync during a roll] ${states} crash states explored`);
    expect(states).toBeGreaterThan(50);
  }, 120_000);
});
