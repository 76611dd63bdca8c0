// What the owner of a queue (the process that opened it) lets other processes and threads do to
// it: the endpoint's server (src/remote/server.ts) and the spool's ingestion call these. The Builder makes
// one at open and hands it to a store that serves others (`Store.attach`); the core itself never
// sees a socket or a file.
import type { GroupReport } from '../core/group-report.js';
import type { SchedulePage } from '../core/schedules.js';
import type { DeadLetter } from './store.js';

/** Options of a push made by another process, as they cross the endpoint (already validated there). */
export interface RemotePushOptions {
  readonly priority?: number;
  /** Wall-clock time (ms since the epoch) before which the items are not delivered. */
  readonly notBefore?: number;
  /** One idempotency key per payload, or none. */
  readonly keys?: readonly string[];
}

/** What `pq stats` and a dashboard read of a live queue. */
export type OwnerStats = Record<string, unknown>;

/** Redrive or purge selection, as `rx.deadLetters.redrive()` / `purge()` take it. */
export interface RemoteSelection {
  readonly seqs?: readonly number[];
  readonly limit?: number;
}

/** The queue an owner exposes. Every call validates nothing twice: the caller checked the input. */
export interface OwnerSurface {
  /** The store's directory. */
  readonly dir: string;
  /** The largest payload the store takes. */
  readonly maxItemBytes: number;
  /** Push as the owner's own producer would; the signal withdraws a push still waiting for capacity. */
  push(payloads: Uint8Array[], options: RemotePushOptions, signal: AbortSignal | undefined): Promise<number[]>;
  /**
   * The queue's and the store's figures now; `groups` (counts of the groups busy and waiting) and,
   * over a store that keeps schedules, `schedules` (their count) among them say that the owner
   * answers `groups()` and `schedules()`.
   */
  stats(): OwnerStats;
  /** The groups with items in flight or waiting aside, the busiest `limit` (checked by the caller) listed. */
  groups(limit: number): GroupReport;
  /** A page of the schedules by name after `after` (`''`: from the first); undefined over a store without schedules. */
  schedules(after: string, limit: number): SchedulePage | undefined;
  listDeadLetters(after: number, limit: number): Promise<DeadLetter[]>;
  redrive(selection: RemoteSelection): Promise<number[]>;
  purge(selection: RemoteSelection): Promise<number>;
  /** Compact the store now (LogStore's `compact()`). */
  compact(): Promise<unknown>;
  /** Some consumer of the owner is reserving items now (`pq pop` refuses to compete with it). */
  readonly consuming: boolean;
  /**
   * Push records of the spool file `file` (32 hex digits), in order, each stored with its origin
   * (`StoredItem.spool`); resolves once all are stored. Only the store's own spool ingestion calls it.
   */
  ingest(file: string, records: readonly SpoolRecordIn[]): Promise<void>;
}

/** A spool record as the owner pushes it. */
export interface SpoolRecordIn {
  readonly record: number;
  readonly bytes: Uint8Array;
  readonly priority: number;
  readonly notBefore: number;
  readonly key: string | undefined;
}
