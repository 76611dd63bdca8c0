/**
 * Checks of the groups the core hands to a store with `features.groups`, shared by every store so
 * that all of them refuse the same contract violations the same way (`ERR_STORE`, nothing of the
 * batch stored), and the push option's check, so that a producer refuses exactly what a store would.
 */
import { utf8Length } from './keys.js';
import { MAX_GROUP_BYTES, type StoredItem } from '../store.js';

/** True when `group` is one a store accepts: a string of 1 to {@link MAX_GROUP_BYTES} UTF-8 bytes. */
export function isValidGroup(group: unknown): group is string {
  if (typeof group !== 'string') return false;
  const n = utf8Length(group);
  return n >= 1 && n <= MAX_GROUP_BYTES;
}

/** What is wrong with the group of `item`, or undefined (an item without a group is fine). */
export function groupFault(item: StoredItem): string | undefined {
  const group = item.group;
  if (group === undefined || isValidGroup(group)) return undefined;
  return `seq ${item.seq} has group ${JSON.stringify(group)}, not a string of 1 to ${MAX_GROUP_BYTES} UTF-8 bytes`;
}

/** What is wrong with the first item of `items` whose group is refused, or undefined. */
export function firstGroupFault(items: readonly StoredItem[]): string | undefined {
  for (const item of items) {
    if (item.group === undefined) continue;
    const fault = groupFault(item);
    if (fault !== undefined) return fault;
  }
  return undefined;
}
