// Writes FORMAT.md §4.2 (SCHEDULE and UNSCHEDULE records) and §4.7 (the upgrade to cursor version 5).
/**
 * The schedules of a LogStore (the Store contract's `features.schedules`). Definitions live in the
 * cursor file: each call writes one record after the checkpoint, and a checkpoint carries the whole
 * table; the progress of each schedule lives in the ITEM frames of the items it fired (their fire
 * entry, in the same CRC-framed record as the item) until a checkpoint takes it over. A store that
 * never holds a schedule keeps the cursor version it had; the first record that needs version 5 is
 * preceded by a version-5 checkpoint, so an older reader meets a version it refuses
 * (ERR_UNSUPPORTED_VERSION) before any new record.
 */
import { QueueError } from '../../../contract/errors.js';
import { storedScheduleFault } from '../../../contract/schedule-table.js';
import type { StoredSchedule } from '../../../contract/store.js';
import type { CursorLog } from './cursor-log.js';
import type { RecordPayload } from './delivery-format.js';
import { CURSOR_VERSION_SCHEDULES, RECORD_SCHEDULE, RECORD_UNSCHEDULE } from './format.js';
import { schedulePayload, unschedulePayload } from './schedule-format.js';

export interface ScheduleDeps {
  readonly cursor: CursorLog;
  readonly maxItemBytes: number;
  /** Write a checkpoint at least of `version` now (the caller holds the cursor lane). */
  readonly upgrade: (version: number) => Promise<unknown>;
  /** Records were written: maintenance may have work (a long cursor log). */
  readonly written: () => void;
}

export class Schedules {
  constructor(private readonly d: ScheduleDeps) {}

  putSchedule(schedule: StoredSchedule, sync: boolean): Promise<void> {
    const fault = storedScheduleFault(schedule, this.d.maxItemBytes);
    if (fault !== undefined) return Promise.reject(new QueueError('ERR_STORE', `LogStore.putSchedule: ${fault}`));
    // The store keeps its own copy: the caller's bytes are the caller's.
    const kept: StoredSchedule = {
      name: schedule.name,
      spec: schedule.spec,
      bytes: schedule.bytes.slice(),
      firedThrough: schedule.firedThrough,
      nextAt: schedule.nextAt,
    };
    return this.#store({ type: RECORD_SCHEDULE, payload: schedulePayload(kept) }, sync, () => this.d.cursor.schedules.put(kept));
  }

  dropSchedule(name: string, sync: boolean): Promise<void> {
    if (typeof name !== 'string' || this.d.cursor.schedules.get(name) === undefined) {
      return Promise.reject(new QueueError('ERR_STORE', `LogStore.dropSchedule: the store holds no schedule ${JSON.stringify(name)}`));
    }
    return this.#store({ type: RECORD_UNSCHEDULE, payload: unschedulePayload(name) }, sync, () => this.d.cursor.schedules.drop(name));
  }

  /** The schedules held, with their progress. */
  list(): StoredSchedule[] {
    return this.d.cursor.schedules.list();
  }

  /**
   * Write `record` once no checkpoint runs (after moving the cursor to version 5, with the lane
   * held), then change the table and sync when asked. A failed write changes nothing.
   */
  #store(record: RecordPayload, sync: boolean, apply: () => void): Promise<void> {
    const { cursor } = this.d;
    const write = (): Promise<void> => {
      const rejected = cursor.writeRecords([record], 'schedule');
      if (rejected !== null) return rejected;
      apply();
      this.d.written();
      return sync ? cursor.sync() : Promise.resolve();
    };
    if (cursor.version >= CURSOR_VERSION_SCHEDULES) return cursor.whenFree(write);
    return cursor.withLane(async () => {
      if (cursor.version < CURSOR_VERSION_SCHEDULES) await this.d.upgrade(CURSOR_VERSION_SCHEDULES);
      return write();
    });
  }
}
