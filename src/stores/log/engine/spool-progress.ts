// Implements FORMAT.md §14.3: how far each spool file was ingested, as the cursor's checkpoint
// (version 4) and the ingested ITEM frames (their spool tag) record it.
/**
 * How many records of each spool file the store holds as items. An ingested item carries its
 * spool file and record number in its frame (one atomic write: item and origin together), and the
 * checkpoint carries the table for the files still in the spool directory, so that after any crash
 * the owner resumes every file at the record after the last one stored: never one twice.
 */
import type { SpoolSource, StoredItem } from '../../../contract/store.js';

const HEX_ID = /^[0-9a-f]{32}$/;

/** What is wrong with an item's spool origin, or undefined when it has none or a good one. */
export function spoolFault(item: StoredItem): string | undefined {
  const s = item.spool as Partial<SpoolSource> | undefined;
  if (s === undefined) return undefined;
  if (s === null || typeof s !== 'object' || typeof s.file !== 'string' || !HEX_ID.test(s.file)) {
    return `seq ${item.seq} has spool origin ${JSON.stringify(s)}, not { file: 32 hex digits, record }`;
  }
  if (!Number.isSafeInteger(s.record) || (s.record as number) < 1)
    return `seq ${item.seq} has spool record ${String(s.record)}, not a positive safe integer`;
  return undefined;
}

export class SpoolProgress {
  /** Records ingested, by spool file id. */
  readonly #ingested = new Map<string, number>();

  get size(): number {
    return this.#ingested.size;
  }

  /** Records of `file` the store holds (0 when none). */
  of(file: string): number {
    return this.#ingested.get(file) ?? 0;
  }

  /** Raise `file`'s count to `records` (never lowers it). */
  set(file: string, records: number): void {
    if (records > this.of(file)) this.#ingested.set(file, records);
  }

  /** Note the origins of items just written. */
  addItems(items: readonly StoredItem[]): void {
    for (const item of items) if (item.spool !== undefined) this.set(item.spool.file, item.spool.record);
  }

  /** Forget `file`: its removal from the spool directory is durable. */
  forget(file: string): void {
    this.#ingested.delete(file);
  }

  /** Every entry, in id order (as a checkpoint holds them). */
  list(): { file: string; records: number }[] {
    return [...this.#ingested]
      .map(([file, records]) => ({ file, records }))
      .sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
  }

  clone(): SpoolProgress {
    const c = new SpoolProgress();
    for (const [file, records] of this.#ingested) c.#ingested.set(file, records);
    return c;
  }
}
