/**
 * The schedules a store keeps (`features.schedules`): the checks every store applies to what the
 * core hands it (`putSchedule`, an item's `fired`), so that all of them refuse the same contract
 * violations the same way (`ERR_STORE`, nothing stored), and the table of schedules with the
 * progress their fires imply, which MemStore and LogStore hold in memory between open and close.
 */
import { utf8Length } from './records/keys.js';
import { MAX_SCHEDULE_NAME_BYTES, MAX_SCHEDULE_SPEC_BYTES, type ScheduleFire, type StoredItem, type StoredSchedule } from './store.js';

function isTime(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** True when `name` is a schedule name a store accepts: a string of 1 to {@link MAX_SCHEDULE_NAME_BYTES} UTF-8 bytes. */
export function isValidScheduleName(name: unknown): name is string {
  if (typeof name !== 'string') return false;
  const n = utf8Length(name);
  return n >= 1 && n <= MAX_SCHEDULE_NAME_BYTES;
}

/** What is wrong with `schedule`, or undefined. */
export function storedScheduleFault(schedule: StoredSchedule, maxItemBytes: number): string | undefined {
  if (schedule === null || typeof schedule !== 'object') return `a schedule is ${String(schedule)}`;
  if (!isValidScheduleName(schedule.name))
    return `schedule name ${JSON.stringify(schedule.name)} is not a string of 1 to ${MAX_SCHEDULE_NAME_BYTES} UTF-8 bytes`;
  const spec = schedule.spec;
  if (typeof spec !== 'string') return `schedule ${schedule.name} has a spec that is not a string`;
  const specBytes = utf8Length(spec);
  if (specBytes < 0 || specBytes > MAX_SCHEDULE_SPEC_BYTES)
    return `schedule ${schedule.name} has a spec that is not a string of at most ${MAX_SCHEDULE_SPEC_BYTES} UTF-8 bytes`;
  if (!(schedule.bytes instanceof Uint8Array) || schedule.bytes.length > maxItemBytes)
    return `schedule ${schedule.name} has no bytes or more than maxItemBytes`;
  if (!isTime(schedule.firedThrough) || !isTime(schedule.nextAt))
    return `schedule ${schedule.name} has a firedThrough or nextAt that is not a non-negative safe integer`;
  return undefined;
}

/** What is wrong with the `fired` of `item`, or undefined (an item without one is fine). */
export function fireFault(item: StoredItem): string | undefined {
  const f = item.fired as Partial<ScheduleFire> | undefined;
  if (f === undefined) return undefined;
  if (f === null || typeof f !== 'object' || !isValidScheduleName(f.name))
    return `seq ${item.seq} has fired ${JSON.stringify(f)}, not { name: a schedule name, slot, next }`;
  if (!isTime(f.slot) || !isTime(f.next)) return `seq ${item.seq} has a fired slot or next that is not a non-negative safe integer`;
  return undefined;
}

/**
 * Schedules by name, with their progress. Fires are kept apart from the definitions until the end
 * of a recovery (a fire may be read before the record that defines its schedule), and apply to the
 * definition of their name whatever order they came in: progress only rises.
 */
export class ScheduleTable {
  readonly #byName = new Map<string, StoredSchedule>();

  get size(): number {
    return this.#byName.size;
  }

  get(name: string): StoredSchedule | undefined {
    return this.#byName.get(name);
  }

  /** Add or replace a definition (its progress is what it says, raised by nothing before it); kept as a copy of its own. */
  put(schedule: StoredSchedule): void {
    this.#byName.set(schedule.name, {
      name: schedule.name,
      spec: schedule.spec,
      bytes: schedule.bytes,
      firedThrough: schedule.firedThrough,
      nextAt: schedule.nextAt,
    });
  }

  drop(name: string): boolean {
    return this.#byName.delete(name);
  }

  /** Raise the progress of the schedules the fires of `items` name; fires of unknown names are ignored. */
  addFires(items: readonly StoredItem[]): void {
    for (const item of items) if (item.fired !== undefined) this.addFire(item.fired);
  }

  addFire(fire: ScheduleFire): void {
    const schedule = this.#byName.get(fire.name);
    if (schedule === undefined || fire.slot <= schedule.firedThrough) return;
    // In place: a fire per item written, and the table's entries are its own (`put` copies).
    const own = schedule as { firedThrough: number; nextAt: number };
    own.firedThrough = fire.slot;
    own.nextAt = fire.next;
  }

  /** Every schedule, by name (copies: the table's own change with later fires). */
  list(): StoredSchedule[] {
    return [...this.#byName.values()].map((s) => ({ ...s })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  clone(): ScheduleTable {
    const c = new ScheduleTable();
    for (const s of this.#byName.values()) c.put(s);
    return c;
  }
}
