/**
 * What the dashboard's page asks for, answered from the queue (./access.ts): the owner's live
 * figures while one serves, the store's files read-only otherwise, and the dead-letter actions
 * through the owner only. Every answer is plain JSON; payloads travel as base64 and the page shows
 * them as text, JSON or hex, never as HTML.
 */
import { QueueError } from '../contract/errors.js';
import { nodeFileSystem } from '../fs/node-fs.js';
import type { LogStore } from '../stores/log/index.js';
import { readSpoolBacklog } from '../stores/log/engine/spool-file.js';
import type { GroupReport } from '../core/group-report.js';
import { describeSchedules } from '../index.js';
import type { SchedulePage } from '../core/schedules.js';
import type { Timings } from '../remote/timings.js';
import type { DeadLetter } from '../contract/store.js';
import { type OwnerLink, QueueAccess } from './access.js';
import { RateHistory, type LatencySeries, type RatePoint, latencySeries } from './history.js';
import {
  type ItemPage,
  type ItemQuery,
  type ListedItem,
  type ScheduledCounts,
  DETAIL_BYTES,
  PREVIEW_BYTES,
  listItems,
  readItem,
  scheduledCounts,
} from './items.js';
import { VerifyRunner, type VerifyState } from './verify.js';

/** A request the dashboard refuses, with the HTTP status and a stable code the page shows. */
export class DashboardError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = 'DashboardError';
    this.status = status;
    this.code = code;
  }
}

/** Seqs one redrive or purge request of the page may name (the owner answers a redrive's new seqs in one frame). */
export const SEQS_PER_ACTION_MAX = 4096;

/** How often the owner's counters are sampled for the throughput chart. */
export const SAMPLE_MS = 1000;

/** How long counts by priority are reused before the files are read again. */
const COUNTS_FRESH_MS = 10_000;

/** Dead letters one page holds at most. */
export const LETTERS_PAGE_MAX = 200;

export type View = 'live' | 'read-only';

/** The figures of the overview; null where the view does not know (in flight, read from the files). */
export interface Figures {
  readonly ready: number | null;
  readonly inFlight: number | null;
  readonly leased: number | null;
  readonly delayed: number | null;
  readonly unacked: number;
  readonly deadLetters: number;
  readonly pendingPushes: number | null;
  readonly capacity: number | null;
  readonly consuming: boolean | null;
  readonly bytesOnDisk: number;
  readonly segments: number;
  readonly spoolPending: number;
  readonly spoolFiles: number;
  readonly nextSeq: number | null;
  /** The owner's counters since it opened the queue (null when read from the files). */
  readonly counters: Readonly<Record<string, number>> | null;
  readonly durability: string | null;
  readonly ackDurability: string | null;
}

export interface Overview {
  readonly view: View;
  readonly at: number;
  readonly dir: string;
  readonly pid: number | null;
  readonly storeId: string | null;
  /** Why the view is read-only: no owner, or one that could not be asked. Null when live. */
  readonly absent: string | null;
  /** A process that held the store as its files were read (read-only view). */
  readonly liveWriter: { readonly pid: number | null } | null;
  /** The directory holds only pushes spooled before any process opened the queue. */
  readonly spoolOnly: boolean;
  readonly figures: Figures;
  readonly byPriority: ScheduledCounts | null;
  /** Why the store's files could not be read beside a live owner (the counts by priority are missing). */
  readonly filesError: string | null;
  readonly rates: RatePoint[];
  readonly latency: LatencySeries;
  /**
   * Which further pages the view has: live, those of what the owner reports (its STATS has
   * `groups`, `schedules`); read-only, both over a log, whose items carry groups and whose files
   * keep schedules.
   */
  readonly extras: { readonly groups: boolean; readonly schedules: boolean };
}

/** The groups page: the owner's report, or why there is none. */
export interface GroupsView {
  readonly view: View;
  readonly at: number;
  readonly pid: number | null;
  /** Null in the read-only view (groups in flight live in the owner's memory) and from an owner that reports none. */
  readonly report: GroupReport | null;
  /** Why the view is read-only (as the overview's `absent`); null when live. */
  readonly absent: string | null;
}

/** The schedules page: a page of schedules by name, from the owner, or from the files without one. */
export interface SchedulesView {
  readonly view: View;
  readonly at: number;
  readonly pid: number | null;
  /** Null from an owner that reports none. */
  readonly page: SchedulePage | null;
  readonly absent: string | null;
}

/** Which of the endpoint's reports an owner answers (said by its STATS). */
interface Reports {
  readonly groups: boolean;
  readonly schedules: boolean;
}

export interface ListedLetter {
  readonly seq: number;
  readonly size: number;
  readonly deliveries: number;
  readonly firstDeliveredAt: number | null;
  readonly lastDeliveredAt: number | null;
  readonly deadAt: number | null;
  readonly reason: string;
  readonly payload: string;
  readonly truncated: boolean;
}

export interface SelectionBody {
  readonly seqs: number[] | null;
  readonly all: boolean;
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
const numOrNull = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const time = (ms: number): number | null => (ms > 0 ? ms : null);

function letter(d: DeadLetter, bytes: number): ListedLetter {
  const shown = d.bytes.subarray(0, bytes);
  return {
    seq: d.seq,
    size: d.bytes.byteLength,
    deliveries: d.deliveries,
    firstDeliveredAt: time(d.firstDeliveredAt),
    lastDeliveredAt: time(d.lastDeliveredAt),
    deadAt: time(d.deadAt),
    reason: d.reason,
    payload: Buffer.from(shown.buffer, shown.byteOffset, shown.byteLength).toString('base64'),
    truncated: shown.byteLength < d.bytes.byteLength,
  };
}

/** Present (an owner that reports it): the page shows its section. */
function present(v: unknown): boolean {
  return v !== undefined && v !== null;
}

export class DashboardApi {
  readonly access: QueueAccess;
  readonly allowActions: boolean;
  readonly #history = new RateHistory();
  readonly #verify: VerifyRunner;
  #counts: { at: number; counts: ScheduledCounts | null } | null = null;
  /** What each owner connection answers, as its last STATS said (an owner's release does not change while connected). */
  readonly #reports = new WeakMap<OwnerLink, Reports>();
  #sampler: ReturnType<typeof setInterval> | null = null;
  #sampling = false;

  constructor(dir: string, options: { allowActions: boolean }) {
    this.access = new QueueAccess(dir);
    this.allowActions = options.allowActions;
    this.#verify = new VerifyRunner(this.access.dir);
  }

  /** Sample the owner's counters every second from now on, for the throughput chart. */
  startSampling(): void {
    this.#sampler ??= setInterval(() => void this.#sample(), SAMPLE_MS);
    this.#sampler.unref();
  }

  async #sample(): Promise<void> {
    if (this.#sampling) return;
    this.#sampling = true;
    try {
      const got = await this.access.withOwner((o) => o.client.stats());
      if (got === null) this.#history.clear();
      else this.#note(got.owner, got.value);
    } catch {
      // The next sample tries again; the page reports errors of its own requests.
    } finally {
      this.#sampling = false;
    }
  }

  #note(owner: OwnerLink, stats: Record<string, unknown>): void {
    this.#reports.set(owner, { groups: present(stats.groups), schedules: present(stats.schedules) });
    this.#history.add(`${owner.pid}:${String(stats.queueId)}:${String(stats.storeId)}`, Date.now(), stats);
  }

  session(): Record<string, unknown> {
    return {
      dir: this.access.dir,
      allowActions: this.allowActions,
      previewBytes: PREVIEW_BYTES,
      detailBytes: DETAIL_BYTES,
      seqsPerActionMax: SEQS_PER_ACTION_MAX,
    };
  }

  // ---- Overview ----

  async overview(): Promise<Overview> {
    const kind = this.access.kind();
    const got = await this.access.withOwner(async (o) => {
      const [stats, timings] = await Promise.all([o.client.stats(), o.client.timings().catch(() => null as Timings | null)]);
      return { stats, timings };
    });
    if (got !== null) {
      this.#note(got.owner, got.value.stats);
      // The owner's figures stand even when its files cannot be read here (damage the owner has
      // not met yet, a file it holds open): the counts by priority then say why they are missing.
      let byPriority: ScheduledCounts | null = null;
      let filesError: string | null = null;
      try {
        byPriority = kind === 'log' ? await this.#scheduled() : null;
      } catch (error) {
        if (!(error instanceof QueueError)) throw error;
        filesError = `${error.code}: ${error.message}`;
      }
      return { ...this.#live(got.owner, got.value.stats, got.value.timings, byPriority), filesError };
    }
    const byPriority = kind === 'log' ? await this.#scheduled() : null;
    this.#history.clear();
    if (kind === 'spool') return this.#spoolOnly();
    const store = await this.#files();
    return this.#readOnly(store, byPriority);
  }

  #live(owner: OwnerLink, stats: Record<string, unknown>, timings: Timings | null, byPriority: ScheduledCounts | null): Overview {
    const store = (stats.store ?? {}) as Record<string, unknown>;
    const spool = (store.spool ?? null) as { files?: number; pendingRecords?: number } | null;
    const counters: Record<string, number> = {};
    for (const name of ['pushed', 'acked', 'nacked', 'redelivered', 'retried', 'deadLettered', 'leaseExpired'])
      counters[name] = num(stats[name]);
    const segments = store.segments;
    return {
      view: 'live',
      at: Date.now(),
      dir: this.access.dir,
      pid: owner.pid,
      storeId: typeof stats.storeId === 'string' ? stats.storeId : null,
      absent: null,
      liveWriter: null,
      spoolOnly: false,
      figures: {
        ready: num(stats.ready),
        inFlight: num(stats.inFlight),
        leased: num(stats.leased),
        delayed: num(stats.delayed),
        unacked: num(store.count),
        deadLetters: num(stats.deadLetters),
        pendingPushes: num(stats.pendingPushes),
        capacity: numOrNull(stats.capacity),
        consuming: stats.consuming === true,
        bytesOnDisk: num(store.bytesOnDisk ?? stats.bytesOnDisk),
        segments: Array.isArray(segments) ? segments.length : num(segments ?? stats.segments),
        spoolPending: num(spool?.pendingRecords),
        spoolFiles: num(spool?.files),
        nextSeq: numOrNull(store.nextSeq),
        counters,
        durability: typeof stats.durability === 'string' ? stats.durability : null,
        ackDurability: typeof stats.ackDurability === 'string' ? stats.ackDurability : null,
      },
      byPriority,
      filesError: null,
      rates: this.#history.points(),
      latency: latencySeries(timings),
      extras: { groups: present(stats.groups), schedules: present(stats.schedules) },
    };
  }

  #readOnly(store: LogStore, byPriority: ScheduledCounts | null): Overview {
    const s = store.inspect();
    const delayed = byPriority?.complete ? byPriority.delayed : null;
    return {
      view: 'read-only',
      at: Date.now(),
      dir: this.access.dir,
      pid: null,
      storeId: s.storeId,
      absent: this.access.absentReason,
      liveWriter: s.liveWriter,
      spoolOnly: false,
      figures: {
        ready: null,
        inFlight: null,
        leased: null,
        delayed,
        unacked: s.count,
        deadLetters: s.deadLetters,
        pendingPushes: null,
        capacity: null,
        consuming: null,
        bytesOnDisk: s.bytesOnDisk,
        segments: s.segments.length,
        spoolPending: s.spool?.pendingRecords ?? 0,
        spoolFiles: s.spool?.files ?? 0,
        nextSeq: s.nextSeq,
        counters: null,
        durability: null,
        ackDurability: null,
      },
      byPriority,
      filesError: null,
      rates: [],
      latency: latencySeries(null),
      extras: { groups: true, schedules: true },
    };
  }

  #spoolOnly(): Overview {
    const backlog = readSpoolBacklog(nodeFileSystem, this.access.dir, () => 0, 64 * 1024);
    return {
      view: 'read-only',
      at: Date.now(),
      dir: this.access.dir,
      pid: null,
      storeId: null,
      absent: this.access.absentReason,
      liveWriter: null,
      spoolOnly: true,
      figures: {
        ready: null,
        inFlight: null,
        leased: null,
        delayed: 0,
        unacked: 0,
        deadLetters: 0,
        pendingPushes: null,
        capacity: null,
        consuming: null,
        bytesOnDisk: 0,
        segments: 0,
        spoolPending: backlog.records,
        spoolFiles: backlog.files,
        nextSeq: null,
        counters: null,
        durability: null,
        ackDurability: null,
      },
      byPriority: null,
      filesError: null,
      rates: [],
      latency: latencySeries(null),
      extras: { groups: false, schedules: false },
    };
  }

  /** Counts by priority from the files, reused for {@link COUNTS_FRESH_MS}. */
  async #scheduled(): Promise<ScheduledCounts | null> {
    const now = performance.now();
    if (this.#counts !== null && now - this.#counts.at < COUNTS_FRESH_MS) return this.#counts.counts;
    const store = await this.access.files();
    const counts = store === null ? null : scheduledCounts(store, Date.now());
    this.#counts = { at: now, counts };
    return counts;
  }

  async #files(): Promise<LogStore> {
    const store = await this.access.files();
    if (store === null)
      throw new DashboardError(
        404,
        'ERR_NOT_FOUND',
        `${this.access.dir} holds no log yet: only pushes spooled before any process opened the queue`,
      );
    return store;
  }

  // ---- Items ----

  async items(q: ItemQuery): Promise<ItemPage & { view: View }> {
    if (this.access.kind() === 'spool')
      return { view: 'read-only', items: [], scannedThrough: q.after, end: true, unacked: 0, nextSeq: 1, lowWaterMark: 1 };
    const store = await this.#files();
    return { view: 'read-only', ...listItems(store, q, Date.now()) };
  }

  async item(seq: number): Promise<ListedItem> {
    const store = await this.#files();
    const item = readItem(store, seq, Date.now());
    if (item === null)
      throw new DashboardError(404, 'ERR_NOT_FOUND', `No unacked item has seq ${seq} (as the store's files were last read)`);
    return item;
  }

  // ---- Dead letters ----

  async deadLetters(after: number, limit: number): Promise<{ view: View; letters: ListedLetter[]; end: boolean }> {
    // One more than shown, to tell the last page from a full one. The owner sends as many as fit
    // one frame, so a short answer from it is the end only when nothing follows it.
    const got = await this.access.withOwner(async (o) => {
      const list = await o.client.deadLetters(after, limit + 1);
      const last = list[list.length - 1];
      const end =
        list.length === 0 || (list.length <= limit && last !== undefined && (await o.client.deadLetters(last.seq, 1)).length === 0);
      return { list, end };
    });
    if (got !== null)
      return { view: 'live', letters: got.value.list.slice(0, limit).map((d) => letter(d, PREVIEW_BYTES)), end: got.value.end };
    const list = this.access.kind() === 'spool' ? [] : (await this.#files()).readDeadLetters({ after, limit: limit + 1 });
    return { view: 'read-only', letters: list.slice(0, limit).map((d) => letter(d, PREVIEW_BYTES)), end: list.length <= limit };
  }

  async deadLetter(seq: number): Promise<ListedLetter> {
    const got = await this.access.withOwner((o) => o.client.deadLetters(seq - 1, 1));
    const list =
      got !== null ? got.value : this.access.kind() === 'spool' ? [] : (await this.#files()).readDeadLetters({ after: seq - 1, limit: 1 });
    const d = list[0];
    if (d === undefined || d.seq !== seq) throw new DashboardError(404, 'ERR_NOT_FOUND', `No dead letter has seq ${seq}`);
    return letter(d, DETAIL_BYTES);
  }

  /** The owner, for an action: refused in read-only mode and while nobody serves the queue. */
  async #actor(): Promise<OwnerLink> {
    if (!this.allowActions)
      throw new DashboardError(
        403,
        'ERR_READ_ONLY',
        'This dashboard is read-only: start it with --allow-actions to redrive and purge dead letters',
      );
    const owner = await this.access.owner();
    if (owner === null)
      throw new DashboardError(
        409,
        'ERR_NO_OWNER',
        `No process serves the queue (${this.access.absentReason}): actions go through the process that has it open`,
      );
    return owner;
  }

  async redrive(body: SelectionBody): Promise<{ count: number; seqs: number[]; from: number[] | null }> {
    const owner = await this.#actor();
    if (body.seqs !== null) {
      const seqs = await owner.client.redrive({ seqs: body.seqs, limit: undefined });
      return { count: seqs.length, seqs, from: seqs.length === body.seqs.length ? body.seqs : null };
    }
    const moved: number[] = [];
    for (;;) {
      const seqs = await owner.client.redrive({ seqs: undefined, limit: SEQS_PER_ACTION_MAX });
      moved.push(...seqs);
      if (seqs.length < SEQS_PER_ACTION_MAX) break;
    }
    return { count: moved.length, seqs: moved.slice(0, SEQS_PER_ACTION_MAX), from: null };
  }

  async purge(body: SelectionBody): Promise<{ count: number }> {
    const owner = await this.#actor();
    const count = await owner.client.purge({ seqs: body.seqs ?? undefined, limit: undefined });
    return { count };
  }

  // ---- Health ----

  async health(): Promise<Record<string, unknown>> {
    const verify: VerifyState = this.#verify.state;
    const got = await this.access.withOwner((o) => o.client.stats());
    if (got !== null) {
      const store = (got.value.store ?? {}) as Record<string, unknown>;
      return { view: 'live', pid: got.owner.pid, dir: this.access.dir, ...store, verify };
    }
    if (this.access.kind() === 'spool')
      return { view: 'read-only', dir: this.access.dir, spoolOnly: true, absent: this.access.absentReason, verify };
    const s = (await this.#files()).inspect();
    return { view: 'read-only', absent: this.access.absentReason, ...s, verify };
  }

  verify(): VerifyState {
    if (this.access.kind() !== 'log') throw new DashboardError(404, 'ERR_NOT_FOUND', `${this.access.dir} holds no log to verify yet`);
    return this.#verify.start();
  }

  // ---- Groups and schedules ----

  /** What `owner` answers, asked with a STATS when no sample said so yet. */
  async #reportsOf(owner: OwnerLink): Promise<Reports> {
    const known = this.#reports.get(owner);
    if (known !== undefined) return known;
    this.#note(owner, await owner.client.stats());
    return this.#reports.get(owner)!;
  }

  /** The owner's busiest `limit` groups; without an owner, none: their figures live in its memory. */
  async groups(limit: number): Promise<GroupsView> {
    const got = await this.access.withOwner(async (o) => ((await this.#reportsOf(o)).groups ? await o.client.groups(limit) : null));
    if (got !== null) return { view: 'live', at: Date.now(), pid: got.owner.pid, report: got.value, absent: null };
    // A directory that is no store is said as the other pages say it.
    this.access.kind();
    return { view: 'read-only', at: Date.now(), pid: null, report: null, absent: this.access.absentReason };
  }

  /**
   * The schedules whose names sort after `after`, by name, at most `limit`: the owner's as it runs
   * them, or, with none, the store's as `pq schedules` lists them (`describeSchedules`), with the
   * next slot each fires.
   */
  async schedules(after: string, limit: number): Promise<SchedulesView> {
    const got = await this.access.withOwner(async (o) =>
      (await this.#reportsOf(o)).schedules ? await o.client.schedules(after, limit) : null,
    );
    if (got !== null) return { view: 'live', at: Date.now(), pid: got.owner.pid, page: got.value, absent: null };
    const absent = this.access.absentReason;
    if (this.access.kind() === 'spool')
      return { view: 'read-only', at: Date.now(), pid: null, page: { total: 0, schedules: [], more: false }, absent };
    const store = await this.#files();
    const now = Date.now();
    const stored = store.inspect().schedules;
    // Only the page is described: a store of many schedules is not all computed for one page.
    const following = stored.filter((s) => s.name > after).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const schedules = await describeSchedules(following.slice(0, limit), now);
    return { view: 'read-only', at: now, pid: null, page: { total: stored.length, schedules, more: following.length > limit }, absent };
  }

  async close(): Promise<void> {
    if (this.#sampler !== null) clearInterval(this.#sampler);
    this.#sampler = null;
    await Promise.all([this.#verify.close(), this.access.close()]);
  }
}

/** A QueueError from below, as the page is told of it. */
export function statusOf(error: QueueError): number {
  switch (error.code) {
    case 'ERR_NOT_FOUND':
      return 404;
    case 'ERR_OWNER_GONE':
    case 'ERR_CLOSED':
      return 503;
    default:
      return 500;
  }
}
