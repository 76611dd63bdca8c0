/**
 * Checks of the priorities and not-before times the core hands to a durable store with
 * `features.scheduling`, shared by LogStore, SqliteStore and LevelStore so that all three refuse
 * the same contract violations the same way (`ERR_STORE`, nothing of the batch stored) and judge
 * the same values on disk as damage; and the one way SqliteStore and LevelStore build the items
 * they return.
 */
import { isScheduled, PRIORITY_MAX, PRIORITY_MIN, type StoredItem } from '../store.js';

/** The priority an item has when it names none. */
export const DEFAULT_PRIORITY = 0;
/** The not-before time an item has when it names none: it may be handed out at once. */
export const NO_NOT_BEFORE = 0;

/**
 * What is wrong with the priority or not-before time of `item`, or undefined. A not-before time
 * is a time in ms as the delivery times are: a non-negative safe integer.
 */
export function scheduleFault(item: StoredItem): string | undefined {
  const { priority, notBefore } = item;
  if (priority !== undefined && !(Number.isInteger(priority) && priority >= PRIORITY_MIN && priority <= PRIORITY_MAX)) {
    return `seq ${item.seq} has priority ${String(priority)}, not an integer from ${PRIORITY_MIN} to ${PRIORITY_MAX}`;
  }
  if (notBefore !== undefined && !(Number.isSafeInteger(notBefore) && notBefore >= 0)) {
    return `seq ${item.seq} has notBefore ${String(notBefore)}, not a non-negative safe integer`;
  }
  return undefined;
}

/** What is wrong with the first item of `items` whose schedule is refused, or undefined. */
export function firstScheduleFault(items: readonly StoredItem[]): string | undefined {
  for (const item of items) {
    const fault = scheduleFault(item);
    if (fault !== undefined) return fault;
  }
  return undefined;
}

/** The scheduled items of `items` (a priority or a not-before time that is not 0), in order. */
export function scheduledOf(items: readonly StoredItem[]): StoredItem[] {
  const out: StoredItem[] = [];
  for (const item of items) if (isScheduled(item)) out.push(item);
  return out;
}

/**
 * The item a store returns for a stored row: the fields that are 0 are left out, as the contract
 * allows, so a plain item reads back as `{ seq, bytes }` whatever the store's format.
 */
export function storedItem(seq: number, bytes: Uint8Array, priority: number, notBefore: number): StoredItem {
  if (priority === DEFAULT_PRIORITY && notBefore === NO_NOT_BEFORE) return { seq, bytes };
  if (notBefore === NO_NOT_BEFORE) return { seq, bytes, priority };
  if (priority === DEFAULT_PRIORITY) return { seq, bytes, notBefore };
  return { seq, bytes, priority, notBefore };
}
