/**
 * The dashboard's items: pages of a store's unacked items, read from its files (a read-only open,
 * src/dashboard/access.ts) with the read-ahead every read of the store uses, filtered as they are
 * read. A page never reads more than {@link SCAN_ITEMS_MAX} items, whatever the filter and the
 * backlog: a store of a million items is paged, never loaded. A filter that matches little says
 * how far it looked (`scannedThrough`), and the next page goes on from there.
 */
import type { LogStore } from '../stores/log/index.js';
import type { StoredItem } from '../contract/store.js';

/** Items read from the store at a time. */
const READ_ITEMS = 512;

/** Items one page reads at most, matched or not. */
export const SCAN_ITEMS_MAX = 20_000;

/** Payload bytes a listed item carries; the item's own view asks for more. */
export const PREVIEW_BYTES = 2048;

/** Payload bytes the view of one item carries at most. */
export const DETAIL_BYTES = 1024 * 1024;

/** Items one page holds at most. */
export const PAGE_ITEMS_MAX = 200;

/**
 * `due`: not waiting for a not-before time (ready, or in flight in the process that has the queue
 * open: its files do not say which); `delayed`: waiting for its not-before time.
 */
export type ItemState = 'due' | 'delayed';

export interface ItemQuery {
  /** Items with a seq above this. */
  readonly after: number;
  readonly limit: number;
  readonly state: ItemState | null;
  readonly priority: number | null;
  /** Items whose idempotency key starts with this. */
  readonly keyPrefix: string | null;
  /** Items of this group. */
  readonly group: string | null;
}

export interface ListedItem {
  readonly seq: number;
  readonly size: number;
  readonly priority: number;
  /** Ms since the epoch, null for none. */
  readonly notBefore: number | null;
  readonly key: string | null;
  readonly group: string | null;
  readonly state: ItemState;
  /** The first {@link PREVIEW_BYTES} (or `bytes` asked) of the payload, base64. */
  readonly payload: string;
  readonly truncated: boolean;
}

export interface ItemPage {
  readonly items: ListedItem[];
  /** Every item up to this seq was looked at: the next page starts after it. */
  readonly scannedThrough: number;
  /** No item lies past `scannedThrough`. */
  readonly end: boolean;
  /** Unacked items in the store, filtered or not. */
  readonly unacked: number;
  readonly nextSeq: number;
  /** The lowest seq not acked (where the backlog starts). */
  readonly lowWaterMark: number;
}

/** The group an item carries (a LogStore reads it from the item's frame: FORMAT.md §3.1, tag 6), or null. */
function groupOf(item: StoredItem): string | null {
  return item.group ?? null;
}

export function listed(item: StoredItem, now: number, bytes = PREVIEW_BYTES): ListedItem {
  const notBefore = item.notBefore ?? 0;
  const shown = item.bytes.subarray(0, bytes);
  return {
    seq: item.seq,
    size: item.bytes.byteLength,
    priority: item.priority ?? 0,
    notBefore: notBefore === 0 ? null : notBefore,
    key: item.key ?? null,
    group: groupOf(item),
    state: notBefore > now ? 'delayed' : 'due',
    payload: Buffer.from(shown.buffer, shown.byteOffset, shown.byteLength).toString('base64'),
    truncated: shown.byteLength < item.bytes.byteLength,
  };
}

function matches(item: StoredItem, q: ItemQuery, now: number): boolean {
  if (q.state !== null && ((item.notBefore ?? 0) > now ? 'delayed' : 'due') !== q.state) return false;
  if (q.priority !== null && (item.priority ?? 0) !== q.priority) return false;
  if (q.keyPrefix !== null && (item.key === undefined || !item.key.startsWith(q.keyPrefix))) return false;
  if (q.group !== null && groupOf(item) !== q.group) return false;
  return true;
}

/** One page of the items of `store` matching `q`, as of `now` (ms since the epoch). */
export function listItems(store: LogStore, q: ItemQuery, now: number): ItemPage {
  const s = store.inspect();
  const before = s.nextSeq;
  const items: ListedItem[] = [];
  let after = q.after;
  let scanned = 0;
  let end = false;
  while (items.length < q.limit && scanned < SCAN_ITEMS_MAX) {
    const page = store.read({ after, before, limit: Math.min(READ_ITEMS, SCAN_ITEMS_MAX - scanned) });
    if (page.length === 0) {
      end = true;
      after = Math.max(after, before - 1);
      break;
    }
    for (const item of page) {
      scanned++;
      after = item.seq;
      if (matches(item, q, now)) {
        items.push(listed(item, now));
        if (items.length === q.limit) break;
      }
    }
  }
  // A full page may end exactly at the last item: the next page finds that out.
  if (!end && items.length < q.limit && after >= before - 1) end = true;
  return { items, scannedThrough: after, end, unacked: s.count, nextSeq: s.nextSeq, lowWaterMark: s.lowWaterMark };
}

/** The unacked item `seq` with up to {@link DETAIL_BYTES} of its payload, or null when it is not (or no longer) one. */
export function readItem(store: LogStore, seq: number, now: number): ListedItem | null {
  const [item] = store.read({ after: seq - 1, before: seq + 1, limit: 1 });
  return item === undefined || item.seq !== seq ? null : listed(item, now, DETAIL_BYTES);
}

export interface PriorityCount {
  readonly priority: number;
  readonly count: number;
}

export interface ScheduledCounts {
  /** When the files were counted (ms since the epoch). */
  readonly at: number;
  /** Unacked items by priority, highest first. */
  readonly byPriority: PriorityCount[];
  /** Items waiting for their not-before time. */
  readonly delayed: number;
  /** The next not-before time among them (ms since the epoch), null for none. */
  readonly nextDueAt: number | null;
  /** False when the scan stopped at its bound: the counts cover the items up to `scannedThrough`. */
  readonly complete: boolean;
  readonly scannedThrough: number;
}

/** Items the counts by priority read at most. */
export const COUNT_ITEMS_MAX = 1_000_000;

/**
 * Unacked items by priority and the delayed ones, read from `scheduledFrom` on: every item before
 * it has priority 0 and no not-before time, so a store without scheduled items reads nothing.
 */
export function scheduledCounts(store: LogStore, now: number): ScheduledCounts {
  const s = store.inspect();
  const counts = new Map<number, number>();
  let delayed = 0;
  let nextDueAt = Infinity;
  let after = s.scheduledFrom - 1;
  let scanned = 0;
  let complete = true;
  for (;;) {
    if (scanned >= COUNT_ITEMS_MAX) {
      complete = false;
      break;
    }
    const page = store.read({ after, before: s.nextSeq, limit: READ_ITEMS });
    if (page.length === 0) break;
    for (const item of page) {
      const p = item.priority ?? 0;
      counts.set(p, (counts.get(p) ?? 0) + 1);
      const notBefore = item.notBefore ?? 0;
      if (notBefore > now) {
        delayed++;
        nextDueAt = Math.min(nextDueAt, notBefore);
      }
    }
    scanned += page.length;
    after = page[page.length - 1]!.seq;
  }
  // The items before scheduledFrom (not read) all have priority 0.
  const zero = s.count - [...counts.values()].reduce((a, b) => a + b, 0);
  if (complete && zero > 0) counts.set(0, (counts.get(0) ?? 0) + zero);
  const byPriority = [...counts].map(([priority, count]) => ({ priority, count })).sort((a, b) => b.priority - a.priority);
  return {
    at: now,
    byPriority,
    delayed,
    nextDueAt: nextDueAt === Infinity ? null : nextDueAt,
    complete,
    scannedThrough: complete ? s.nextSeq - 1 : after,
  };
}
