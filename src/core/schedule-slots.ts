// When a schedule fires: its slots, for `{ everyMs }` (multiples of the period since the Unix
// epoch) and for `{ cron, tz }` (the optional peer `cron-parser`, loaded when a cron schedule is
// first met), the slots due in a span, and the text a store keeps of a schedule (its spec).
import { QueueError } from '../contract/errors.js';
import { isValidGroup } from '../contract/records/groups.js';
import { MAX_SCHEDULE_SPEC_BYTES, PRIORITY_MAX, PRIORITY_MIN } from '../contract/store.js';
import { expectation, knownKeys, optionsObject, positiveInteger } from '../lib/validate.js';
import { groupOption } from './push-options.js';

/** What `schedule()` does with the slots that passed while no queue was open over the store. */
export type CatchUp = 'none' | 'last' | 'all';

/** When a schedule fires: `{ everyMs }` or `{ cron, tz }`. */
export type ScheduleSpec = { readonly everyMs: number } | { readonly cron: string; readonly tz?: string };

/** The options of `schedule(name, spec, value, options)`. */
export interface ScheduleOptions {
  /**
   * The slots that passed while no queue was open over the store (a stopped process, a crash, a
   * power loss), found when the queue next opens: `'none'` fires none of them, `'last'` the latest
   * one, `'all'` every one, the latest `maxCatchUp` at most, in order.
   * @default 'last'
   */
  catchUp?: CatchUp;
  /** With `catchUp: 'all'`, and while the queue runs: at most this many slots fire at once, the latest. @default 100 */
  maxCatchUp?: number;
  /** Each fired item's priority. @default 0 */
  priority?: number;
  /** Each fired item's group (`push(value, { group })`). */
  group?: string;
}

/** A schedule as the queue runs it: what a store keeps of it, decoded. */
export interface ScheduleDefinition {
  readonly everyMs?: number;
  readonly cron?: string;
  readonly tz?: string;
  readonly catchUp: CatchUp;
  readonly maxCatchUp: number;
  readonly priority: number;
  readonly group?: string;
}

/** The slots of a schedule: strictly after a time, and strictly before one. */
export interface Slots {
  /** The first slot after `after` (ms since the epoch). */
  next(after: number): number;
  /** The last slot before `before`, or -Infinity when there is none. */
  prev(before: number): number;
}

export const DEFAULT_MAX_CATCH_UP = 100;
const MAX_CATCH_UP_LIMIT = 100_000;
const CATCH_UPS: readonly string[] = ['none', 'last', 'all'];
/** The time zone of a cron schedule that names none: a schedule stored once runs alike on every machine. */
const DEFAULT_TZ = 'UTC';
/** The format of a schedule's spec text; a later one is left alone (not fired) and reported. */
const SPEC_VERSION = 1;

/** `{ everyMs }`: slots at the multiples of the period since the Unix epoch. */
export function everySlots(everyMs: number): Slots {
  return {
    next: (after) => (Math.floor(after / everyMs) + 1) * everyMs,
    prev: (before) => (Math.ceil(before / everyMs) - 1) * everyMs,
  };
}

// ---- cron-parser, the optional peer ----

/** The part of cron-parser used here, typed here so that the peer need not be installed to type-check. */
interface CronExpression {
  next(): { getTime(): number };
  prev(): { getTime(): number };
  reset(date: Date): void;
}
interface CronParser {
  parse(expression: string, options: { currentDate: Date; tz: string; hashSeed: string; strict?: boolean }): CronExpression;
}

let cron: Promise<CronParser> | undefined;

/** cron-parser, loaded once; rejects with `ERR_UNSUPPORTED` naming the package when it is not installed. */
export function loadCron(): Promise<CronParser> {
  cron ??= (async () => {
    const peer: string = 'cron-parser';
    const mod = (await import(peer)) as { CronExpressionParser?: CronParser; default?: CronParser | { CronExpressionParser?: CronParser } };
    const parser =
      mod.CronExpressionParser ??
      (mod.default as { CronExpressionParser?: CronParser } | undefined)?.CronExpressionParser ??
      (mod.default as CronParser | undefined);
    if (parser === undefined || typeof parser.parse !== 'function') throw new Error('cron-parser has no CronExpressionParser export');
    return parser;
  })().catch((error: unknown) => {
    cron = undefined;
    throw new QueueError(
      'ERR_UNSUPPORTED',
      `A cron schedule needs the optional package cron-parser (npm install cron-parser@5): ${(error as Error)?.message ?? error}`,
      { cause: error },
    );
  });
  return cron;
}

/**
 * The slots of `expression` in `tz`. `H` in an expression is hashed with the schedule's name, so
 * its slots are the same in every process.
 */
export function cronSlots(parser: CronParser, expression: string, tz: string, name: string): Slots {
  // Parsed once, then moved to each time asked about: parsing costs about as much as a step.
  let parsed: CronExpression | undefined;
  const at = (t: number): CronExpression => {
    if (parsed === undefined) parsed = parser.parse(expression, { currentDate: new Date(t), tz, hashSeed: name });
    else parsed.reset(new Date(t));
    return parsed;
  };
  return {
    next: (after) => at(after).next().getTime(),
    prev: (before) => {
      try {
        return at(before).prev().getTime();
      } catch {
        // Before the first slot the parser can name.
        return -Infinity;
      }
    },
  };
}

/**
 * The latest `max` slots in `(after, until]`, in order, and the first slot after `until`. Found
 * walking back from `until` at most `max` slots (so a schedule stopped for a year costs `max`
 * steps, not a year of slots), then forward with `next` from there, so the slots are those the
 * schedule fires while it runs.
 */
export function dueSlots(slots: Slots, after: number, until: number, max: number): { due: number[]; next: number } {
  let start = until + 1;
  for (let i = 0; i < max; i++) {
    const p = slots.prev(start);
    if (!(p > after)) break;
    start = p;
  }
  const due: number[] = [];
  let s = slots.next(Math.max(after, start - 1));
  for (; s <= until; s = slots.next(s)) due.push(s);
  return { due: due.length > max ? due.slice(due.length - max) : due, next: s };
}

// ---- validation of schedule()'s arguments, and the spec text a store keeps ----

/** `schedule()`'s `spec` and `options`, checked: a definition, and whether it needs cron-parser. */
export function scheduleDefinition(specArg: unknown, optionsArg: unknown): ScheduleDefinition {
  if (specArg === undefined) throw new TypeError(expectation('spec', 'an object { everyMs } or { cron, tz? }', specArg));
  const spec = optionsObject('spec', specArg);
  knownKeys('spec', spec, ['everyMs', 'cron', 'tz']);
  let everyMs: number | undefined;
  let cronText: string | undefined;
  let tz: string | undefined;
  if (spec.everyMs !== undefined) {
    if (spec.cron !== undefined || spec.tz !== undefined)
      throw new TypeError(expectation('spec', 'either { everyMs } or { cron, tz? }, not both', specArg));
    everyMs = positiveInteger('spec.everyMs', spec.everyMs);
  } else {
    if (typeof spec.cron !== 'string')
      throw new TypeError(expectation('spec.cron', 'a cron expression (a string), or spec.everyMs', spec.cron));
    if (spec.cron.trim() === '') throw new RangeError(expectation('spec.cron', 'a cron expression', spec.cron));
    cronText = spec.cron;
    tz = spec.tz === undefined ? DEFAULT_TZ : (spec.tz as string);
    if (typeof tz !== 'string') throw new TypeError(expectation('spec.tz', 'an IANA time zone name', spec.tz));
    try {
      new Intl.DateTimeFormat('en', { timeZone: tz });
    } catch {
      throw new RangeError(expectation('spec.tz', 'an IANA time zone name', spec.tz));
    }
  }
  const o = optionsObject('options', optionsArg);
  knownKeys('options', o, ['catchUp', 'maxCatchUp', 'priority', 'group']);
  const catchUp = o.catchUp ?? 'last';
  if (typeof catchUp !== 'string') throw new TypeError(expectation('options.catchUp', "'none', 'last' or 'all'", catchUp));
  if (!CATCH_UPS.includes(catchUp)) throw new RangeError(expectation('options.catchUp', "'none', 'last' or 'all'", catchUp));
  const maxCatchUp = o.maxCatchUp === undefined ? DEFAULT_MAX_CATCH_UP : positiveInteger('options.maxCatchUp', o.maxCatchUp);
  if (maxCatchUp > MAX_CATCH_UP_LIMIT)
    throw new RangeError(expectation('options.maxCatchUp', `a positive integer up to ${MAX_CATCH_UP_LIMIT}`, maxCatchUp));
  let priority = 0;
  if (o.priority !== undefined) {
    const what = `an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`;
    if (typeof o.priority !== 'number') throw new TypeError(expectation('options.priority', what, o.priority));
    if (!Number.isInteger(o.priority) || o.priority < PRIORITY_MIN || o.priority > PRIORITY_MAX)
      throw new RangeError(expectation('options.priority', what, o.priority));
    priority = o.priority === 0 ? 0 : o.priority;
  }
  const group = o.group === undefined ? undefined : groupOption('options.group', o.group);
  const definition: ScheduleDefinition = { everyMs, cron: cronText, tz, catchUp: catchUp as CatchUp, maxCatchUp, priority, group };
  if (new TextEncoder().encode(specText(definition)).length > MAX_SCHEDULE_SPEC_BYTES) {
    throw new RangeError(
      expectation(
        'spec',
        `a schedule whose description (cron expression, time zone, group) fits in ${MAX_SCHEDULE_SPEC_BYTES} bytes`,
        specArg,
      ),
    );
  }
  return definition;
}

/** The text a store keeps of a definition: its fields in one order, so that equal definitions have equal texts. */
export function specText(d: ScheduleDefinition): string {
  return JSON.stringify({
    v: SPEC_VERSION,
    ...(d.everyMs !== undefined ? { everyMs: d.everyMs } : { cron: d.cron, tz: d.tz }),
    catchUp: d.catchUp,
    maxCatchUp: d.maxCatchUp,
    priority: d.priority,
    ...(d.group !== undefined ? { group: d.group } : {}),
  });
}

/** The definition a store's spec text holds, or the reason it cannot be run (a later format, damage). */
export function parseSpecText(text: string): ScheduleDefinition | { problem: string } {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return { problem: 'its description is not JSON' };
  }
  if (o === null || typeof o !== 'object') return { problem: 'its description is not an object' };
  if (o.v !== SPEC_VERSION) return { problem: `its description has format ${String(o.v)}, this release reads ${SPEC_VERSION}` };
  const catchUp = o.catchUp;
  const maxCatchUp = o.maxCatchUp;
  const priority = o.priority;
  const group = o.group;
  const fine =
    typeof catchUp === 'string' &&
    CATCH_UPS.includes(catchUp) &&
    Number.isSafeInteger(maxCatchUp) &&
    (maxCatchUp as number) >= 1 &&
    Number.isInteger(priority) &&
    (priority as number) >= PRIORITY_MIN &&
    (priority as number) <= PRIORITY_MAX &&
    (group === undefined || isValidGroup(group)) &&
    ((Number.isSafeInteger(o.everyMs) && (o.everyMs as number) >= 1 && o.cron === undefined) ||
      (typeof o.cron === 'string' && typeof o.tz === 'string' && o.everyMs === undefined));
  if (!fine) return { problem: 'its description is malformed' };
  return {
    everyMs: o.everyMs as number | undefined,
    cron: o.cron as string | undefined,
    tz: o.tz as string | undefined,
    catchUp: catchUp as CatchUp,
    maxCatchUp: maxCatchUp as number,
    priority: priority as number,
    group: group as string | undefined,
  };
}
