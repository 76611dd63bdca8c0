// Durable schedules (`tx.schedule(name, spec, value, options)`): the core's side. Definitions and
// progress are the store's (`features.schedules`); this object runs them: one timer for the earliest
// next slot of every schedule, and each slot fired as one push whose item carries the slot
// (`StoredItem.fired`), so that the item and the schedule's progress are one atomic write: after a
// crash at any point a slot's item exists, and the slot counts as fired, or neither. At open the
// slots that passed while no queue was open are fired or passed over as the schedule's `catchUp`
// says. The items are ordinary items: retries, dead letters, priorities and groups apply.
import { QueueError } from '../contract/errors.js';
import { isValidScheduleName } from '../contract/schedule-table.js';
import { MAX_SCHEDULE_NAME_BYTES, type ScheduleFire, type Store, type StoredSchedule } from '../contract/store.js';
import { expectation } from '../lib/validate.js';
import type { TimeSource } from '../lib/clock.js';
import { DueTimer } from './due-timer.js';
import { Heap } from './heap.js';
import {
  type CatchUp,
  type ScheduleDefinition,
  type Slots,
  cronSlots,
  dueSlots,
  everySlots,
  loadCron,
  parseSpecText,
  scheduleDefinition,
  specText,
} from './schedule-slots.js';

/** What `tx.schedules()` lists of one schedule. */
export interface ScheduleInfo {
  readonly name: string;
  /** `{ everyMs }` schedules: the period. */
  readonly everyMs?: number;
  /** `{ cron, tz }` schedules: the expression and the time zone. */
  readonly cron?: string;
  readonly tz?: string;
  readonly catchUp: CatchUp;
  readonly maxCatchUp: number;
  readonly priority: number;
  readonly group?: string;
  /** Every slot at or before this time (ms since the epoch) fired or was passed over. */
  readonly firedThrough: number;
  /**
   * When it fires next, in ms since the epoch (a slot already passed fires at once); null when
   * this process cannot run it (a cron schedule without cron-parser, a description of a later release).
   */
  readonly nextAt: number | null;
  /** Why it does not run here, when it does not. */
  readonly problem?: string;
}

/** A page of schedules by name (the endpoint's SCHEDULES). */
export interface SchedulePage {
  /** Schedules in all. */
  readonly total: number;
  /** The first of those whose names sort after the page's `after`, by name. */
  readonly schedules: ScheduleInfo[];
  /** More schedules follow the last one listed. */
  readonly more: boolean;
}

/** What the schedules ask of the core. */
export interface ScheduleHost {
  readonly store: Store;
  readonly time: TimeSource;
  /** Whether definitions are synced when stored (the queue's durability is not `none`). */
  readonly sync: boolean;
  /**
   * Push one item per fire, each `bytes[i]` carrying `fires[i]`, all with `priority` and `group`,
   * in order, as one push.
   */
  fire(bytes: Uint8Array[], fires: ScheduleFire[], priority: number, group: string | undefined): Promise<unknown>;
  /** Why the queue refuses work now (closed, failed), or undefined. */
  refusal(): QueueError | undefined;
  /** The store failed a definition's call: fail the queue. */
  fail(error: unknown): QueueError;
}

/** A full disk refused a fire: it is tried again this long after. */
const FIRE_RETRY_MS = 1000;

/** The fires of one or more schedules that share a priority and a group, made together: one push. */
interface Batch {
  readonly priority: number;
  readonly group: string | undefined;
  readonly runs: { readonly r: Running; readonly fires: ScheduleFire[] }[];
}

/** A schedule being run. */
interface Running {
  readonly stored: StoredSchedule;
  readonly definition: ScheduleDefinition | undefined;
  /** Undefined when this process cannot compute its slots (see `problem`). */
  readonly slots: Slots | undefined;
  readonly problem: string | undefined;
  firedThrough: number;
  nextAt: number;
  /** A push of its fires is being stored. */
  firing: boolean;
  /** Bumped when the schedule is replaced or dropped: a timer entry of an older one is stale. */
  readonly generation: number;
}

/** Entries of the timer heap: a schedule's next slot. */
interface Due {
  readonly at: number;
  readonly name: string;
  readonly generation: number;
}

function earlier(a: Due, b: Due): boolean {
  return a.at < b.at;
}

/** The name given to `schedule()` and `unschedule()`. */
export function scheduleName(value: unknown): string {
  const what = `a string of 1 to ${MAX_SCHEDULE_NAME_BYTES} UTF-8 bytes`;
  if (typeof value !== 'string') throw new TypeError(expectation('name', what, value));
  if (!isValidScheduleName(value)) throw new RangeError(expectation('name', what, value));
  return value;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export class Schedules {
  readonly #host: ScheduleHost;
  readonly #running = new Map<string, Running>();
  readonly #due = new Heap<Due>(earlier);
  readonly #timer: DueTimer;
  #generation = 0;
  /** Store calls of definitions, one at a time (the contract's rule); each waits for the one before. */
  #lane: Promise<unknown> = Promise.resolve();
  #stopped = false;
  /** Problems already reported, so that each is reported once. */
  readonly #warned = new Set<string>();
  /**
   * The fires of the slots found due in this pass, by priority and group: each batch is one push
   * (`#flush`), so that ten thousand schedules due at once cost one push of ten thousand items.
   */
  #batches = new Map<string, Batch>();

  constructor(host: ScheduleHost) {
    this.#host = host;
    // On the wall clock: a slot is a time of day. Unref'd, as the not-before timer is when no consumer
    // waits: a process whose only work is a schedule must keep itself running (a `process()` loop does).
    this.#timer = new DueTimer(host.time, host.time.wallNow, this.#onTimer, false);
  }

  /** Schedules held. */
  get size(): number {
    return this.#running.size;
  }

  /**
   * The store's schedules, at open. Loads cron-parser when a cron schedule is among them; without
   * it those schedules are kept and listed but not fired, and a process warning says so once.
   */
  async load(stored: readonly StoredSchedule[]): Promise<void> {
    const definitions = stored.map((s) => ({ stored: s, parsed: parseSpecText(s.spec) }));
    let parser: Awaited<ReturnType<typeof loadCron>> | undefined;
    let cronProblem: string | undefined;
    if (definitions.some((d) => !('problem' in d.parsed) && d.parsed.cron !== undefined)) {
      try {
        parser = await loadCron();
      } catch (error) {
        cronProblem = (error as Error).message;
      }
    }
    for (const { stored: s, parsed } of definitions) {
      let slots: Slots | undefined;
      let problem: string | undefined;
      if ('problem' in parsed) problem = `Schedule ${s.name} cannot run in this release: ${parsed.problem}`;
      else if (parsed.everyMs !== undefined) slots = everySlots(parsed.everyMs);
      else if (parser !== undefined) slots = cronSlots(parser, parsed.cron!, parsed.tz!, s.name);
      else problem = `Schedule ${s.name} is not fired: ${cronProblem}`;
      if (problem !== undefined) this.#warn(problem);
      const definition = 'problem' in parsed ? undefined : parsed;
      this.#running.set(s.name, {
        stored: s,
        definition,
        slots,
        problem,
        firedThrough: s.firedThrough,
        nextAt: s.nextAt,
        firing: false,
        generation: ++this.#generation,
      });
    }
  }

  /**
   * Fire what passed while no queue was open, as each schedule's `catchUp` says, and arm the timer
   * for what comes next. Called once the queue is open; the fires are pushes, not waited for.
   */
  start(): void {
    const now = this.#host.time.wallNow();
    for (const r of this.#running.values()) {
      if (r.slots === undefined || r.definition === undefined) continue;
      // Its next slot is still to come (what the store kept, from its last fire): nothing to compute.
      if (r.nextAt > now && r.firedThrough < r.nextAt) {
        this.#enqueue(r);
        continue;
      }
      const { catchUp, maxCatchUp } = r.definition;
      const want = catchUp === 'none' ? 0 : catchUp === 'last' ? 1 : maxCatchUp;
      if (want > 0) {
        const { due, next } = dueSlots(r.slots, r.firedThrough, now, want);
        if (due.length > 0) {
          this.#fire(r, due, next);
          continue;
        }
      }
      // Nothing to fire now: the next slot after what fired, or after now when slots were passed over.
      r.nextAt = r.slots.next(Math.max(r.firedThrough, now));
      this.#enqueue(r);
    }
    this.#flush();
  }

  /** Stop firing (the queue closes or failed); pushes already made finish as the queue's close says. */
  stop(): void {
    this.#stopped = true;
    this.#timer.disarm();
    this.#due.clear();
  }

  /** Keep the process alive while a consumer waits and a slot is still to come, as due items do. */
  hold(held: boolean): void {
    this.#timer.hold(held);
  }

  /** `tx.schedule()`: validated here, stored durably, then run. */
  async schedule(nameArg: unknown, specArg: unknown, bytes: Uint8Array, optionsArg: unknown): Promise<ScheduleInfo> {
    const name = scheduleName(nameArg);
    const definition = scheduleDefinition(specArg, optionsArg);
    let slots: Slots;
    if (definition.everyMs !== undefined) slots = everySlots(definition.everyMs);
    else {
      const parser = await loadCron();
      slots = cronSlots(parser, definition.cron!, definition.tz!, name);
      try {
        slots.next(this.#host.time.wallNow());
      } catch (error) {
        throw new RangeError(
          expectation('spec.cron', `a cron expression cron-parser reads (${(error as Error)?.message ?? error})`, definition.cron),
        );
      }
    }
    if (bytes.length > this.#host.store.maxItemBytes) {
      throw new QueueError(
        'ERR_TOO_LARGE',
        `A schedule's item of ${bytes.length} bytes exceeds the store's limit of ${this.#host.store.maxItemBytes} bytes`,
      );
    }
    const spec = specText(definition);
    return this.#serially(async () => {
      this.#check();
      const old = this.#running.get(name);
      // The same definition again (a process that declares its schedules at every start): nothing changes.
      if (old !== undefined && old.stored.spec === spec && sameBytes(old.stored.bytes, bytes)) return this.#info(old);
      const now = this.#host.time.wallNow();
      // A new or changed schedule fires from now on: no slot before it, and none twice.
      const firedThrough = Math.max(now, old?.firedThrough ?? 0);
      const nextAt = slots.next(firedThrough);
      const stored: StoredSchedule = { name, spec, bytes, firedThrough, nextAt };
      await this.#call(() => this.#host.store.putSchedule!(stored, this.#host.sync));
      const r: Running = {
        stored,
        definition,
        slots,
        problem: undefined,
        firedThrough,
        nextAt,
        firing: false,
        generation: ++this.#generation,
      };
      this.#running.set(name, r);
      this.#enqueue(r);
      return this.#info(r);
    });
  }

  /** `tx.unschedule()`: resolves true once the schedule is deleted durably, false when there was none. */
  async unschedule(nameArg: unknown): Promise<boolean> {
    const name = scheduleName(nameArg);
    return this.#serially(async () => {
      this.#check();
      if (!this.#running.has(name)) return false;
      await this.#call(() => this.#host.store.dropSchedule!(name, this.#host.sync));
      // Its timer entry goes stale; a fire in flight finishes as an ordinary item.
      this.#running.delete(name);
      return true;
    });
  }

  /** `tx.schedules()`: every schedule, by name. */
  list(): ScheduleInfo[] {
    return [...this.#running.values()].map((r) => this.#info(r)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /**
   * The first `limit` schedules by name of those whose names sort after `after` (`''`: from the
   * first), and whether more follow: one walk of the schedules, keeping `limit` of them, so that a
   * page costs the owner memory for its own entries only.
   */
  page(after: string, limit: number): SchedulePage {
    // The latest name leaves the heap first: it is the one a name earlier than all kept replaces.
    const kept = new Heap<Running>((a, b) => a.stored.name > b.stored.name);
    let following = 0;
    for (const r of this.#running.values()) {
      const name = r.stored.name;
      if (!(name > after)) continue;
      following++;
      if (kept.size < limit) kept.push(r);
      else if (name < kept.peek()!.stored.name) {
        kept.pop();
        kept.push(r);
      }
    }
    const schedules: ScheduleInfo[] = new Array(kept.size);
    for (let i = kept.size - 1; i >= 0; i--) schedules[i] = this.#info(kept.pop()!);
    return { total: this.#running.size, schedules, more: following > schedules.length };
  }

  #check(): void {
    const refusal = this.#host.refusal();
    if (refusal !== undefined) throw refusal;
  }

  /** A store call of a definition: a rejection fails the queue (the store's state is not known), a full disk only the call. */
  async #call(fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (error) {
      if (error instanceof QueueError && error.code === 'ERR_STORE_FULL') throw error;
      throw this.#host.fail(error);
    }
  }

  #serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lane.then(fn, fn);
    this.#lane = run.catch(() => {});
    return run;
  }

  #info(r: Running): ScheduleInfo {
    const d = r.definition;
    const info: {
      name: string;
      everyMs?: number;
      cron?: string;
      tz?: string;
      catchUp: CatchUp;
      maxCatchUp: number;
      priority: number;
      group?: string;
      firedThrough: number;
      nextAt: number | null;
      problem?: string;
    } = {
      name: r.stored.name,
      catchUp: d?.catchUp ?? 'none',
      maxCatchUp: d?.maxCatchUp ?? 0,
      priority: d?.priority ?? 0,
      firedThrough: r.firedThrough,
      nextAt: r.slots === undefined ? null : r.nextAt,
    };
    if (d?.everyMs !== undefined) info.everyMs = d.everyMs;
    if (d?.cron !== undefined) {
      info.cron = d.cron;
      info.tz = d.tz!;
    }
    if (d?.group !== undefined) info.group = d.group;
    if (r.problem !== undefined) info.problem = r.problem;
    return info;
  }

  #enqueue(r: Running): void {
    if (this.#stopped || r.slots === undefined) return;
    this.#due.push({ at: r.nextAt, name: r.stored.name, generation: r.generation });
    if (r.nextAt < this.#timer.dueMs) this.#timer.arm(r.nextAt);
  }

  /**
   * Gather one fire per slot of `slots` (in order; `next` is the slot after the last) for `r` into
   * the batch of its priority and group; `#flush` pushes them.
   */
  #fire(r: Running, slots: number[], next: number): void {
    const name = r.stored.name;
    const fires: ScheduleFire[] = new Array(slots.length);
    for (let i = 0; i < slots.length; i++) fires[i] = { name, slot: slots[i]!, next: i + 1 < slots.length ? slots[i + 1]! : next };
    r.firing = true;
    const { priority, group } = r.definition!;
    const key = group === undefined ? String(priority) : `${priority} ${group}`;
    let batch = this.#batches.get(key);
    if (batch === undefined) this.#batches.set(key, (batch = { priority, group, runs: [] }));
    batch.runs.push({ r, fires });
  }

  /** Push the batches gathered in this pass, one push each. */
  #flush(): void {
    if (this.#batches.size === 0) return;
    const batches = this.#batches;
    this.#batches = new Map();
    for (const batch of batches.values()) {
      const bytes: Uint8Array[] = [];
      const fires: ScheduleFire[] = [];
      for (const { r, fires: own } of batch.runs) {
        for (const fire of own) {
          bytes.push(r.stored.bytes);
          fires.push(fire);
        }
      }
      this.#host.fire(bytes, fires, batch.priority, batch.group).then(
        () => this.#fired(batch),
        (error: unknown) => this.#notFired(batch, error),
      );
    }
  }

  /** A batch is stored: each schedule's progress moves to its last slot, and its next slot is waited for. */
  #fired(batch: Batch): void {
    const now = this.#host.time.wallNow();
    for (const { r, fires } of batch.runs) {
      const last = fires[fires.length - 1]!;
      r.firing = false;
      if (last.slot > r.firedThrough) r.firedThrough = last.slot;
      r.nextAt = last.next;
      if (this.#stopped || this.#running.get(r.stored.name) !== r) continue;
      // Slots that came while this push was stored fire now, without waiting for a timer.
      if (r.nextAt <= now) this.#fireDue(r);
      else this.#enqueue(r);
    }
    this.#flush();
  }

  /** A batch was refused and the queue goes on (a full disk): the same slots are tried again later, so none is lost to it. */
  #notFired(batch: Batch, error: unknown): void {
    for (const { r, fires } of batch.runs) {
      r.firing = false;
      if (this.#stopped || this.#host.refusal() !== undefined || this.#running.get(r.stored.name) !== r) continue;
      this.#warn(
        `Schedule ${r.stored.name} could not fire slot ${new Date(fires[0]!.slot).toISOString()}: ${(error as Error)?.message ?? error}; trying again`,
      );
      r.nextAt = fires[0]!.slot;
      this.#due.push({ at: this.#host.time.wallNow() + FIRE_RETRY_MS, name: r.stored.name, generation: r.generation });
    }
    const top = this.#due.peek();
    if (top !== undefined && top.at < this.#timer.dueMs) this.#timer.arm(top.at);
  }

  /**
   * Fire every slot of `r` due since its last fire, in order (a timer late by several slots fires
   * them all), the latest `maxCatchUp` at most; or wait for the next one.
   */
  #fireDue(r: Running): void {
    const now = this.#host.time.wallNow();
    const { due, next } = dueSlots(r.slots!, r.firedThrough, now, r.definition!.maxCatchUp);
    if (due.length > 0) return this.#fire(r, due, next);
    r.nextAt = next;
    this.#enqueue(r);
  }

  readonly #onTimer = (): void => {
    if (this.#stopped) return;
    const now = this.#host.time.wallNow();
    while (this.#due.size > 0 && this.#due.peek()!.at <= now) {
      const d = this.#due.pop()!;
      const r = this.#running.get(d.name);
      if (r === undefined || r.generation !== d.generation || r.firing || r.slots === undefined) continue;
      this.#fireDue(r);
    }
    this.#flush();
    // Early (see due-timer.ts), or entries left: armed for the earliest.
    const top = this.#due.peek();
    if (top !== undefined && top.at < this.#timer.dueMs) this.#timer.arm(top.at);
  };

  #warn(message: string): void {
    if (this.#warned.has(message)) return;
    this.#warned.add(message);
    process.emitWarning(message, { type: 'PersistentQueueWarning', code: 'PQ_SCHEDULE' });
  }
}

/**
 * What `tx.schedules()` would list of `stored` (a store's schedules, read without opening a queue:
 * `pq schedules`) at `now`: each with the next slot it fires. A slot already passed fires at the
 * next open as the schedule's `catchUp` says: under `'last'` the latest passed slot, under `'all'`
 * the first of those it fires, under `'none'` the first slot still to come.
 */
export async function describeSchedules(stored: readonly StoredSchedule[], now: number): Promise<ScheduleInfo[]> {
  const parsed = stored.map((s) => ({ s, d: parseSpecText(s.spec) }));
  let parser: Awaited<ReturnType<typeof loadCron>> | undefined;
  let cronProblem = '';
  if (parsed.some(({ d }) => !('problem' in d) && d.cron !== undefined)) {
    try {
      parser = await loadCron();
    } catch (error) {
      cronProblem = (error as Error).message;
    }
  }
  const out = parsed.map(({ s, d }): ScheduleInfo => {
    if ('problem' in d)
      return {
        name: s.name,
        catchUp: 'none',
        maxCatchUp: 0,
        priority: 0,
        firedThrough: s.firedThrough,
        nextAt: null,
        problem: `it cannot run in this release: ${d.problem}`,
      };
    const base = {
      name: s.name,
      ...(d.everyMs !== undefined ? { everyMs: d.everyMs } : { cron: d.cron!, tz: d.tz! }),
      catchUp: d.catchUp,
      maxCatchUp: d.maxCatchUp,
      priority: d.priority,
      ...(d.group !== undefined ? { group: d.group } : {}),
      firedThrough: s.firedThrough,
    };
    const slots =
      d.everyMs !== undefined ? everySlots(d.everyMs) : parser !== undefined ? cronSlots(parser, d.cron!, d.tz!, s.name) : undefined;
    if (slots === undefined) return { ...base, nextAt: null, problem: cronProblem };
    if (s.nextAt > now && s.firedThrough < s.nextAt) return { ...base, nextAt: s.nextAt };
    const { due, next } =
      d.catchUp === 'none'
        ? { due: [], next: slots.next(Math.max(s.firedThrough, now)) }
        : dueSlots(slots, s.firedThrough, now, d.catchUp === 'last' ? 1 : d.maxCatchUp);
    return { ...base, nextAt: due[0] ?? next };
  });
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}
