// Reservations that become unreachable unsettled are returned to the queue (README, "Guarantees").
import type { Entry, Guard } from './entry.js';

/**
 * Registering every reservation with a FinalizationRegistry costs about 0.6 µs (measured on
 * Node 20), more than the rest of a delivery, so deliveries are tracked in groups: each unsettled
 * Reserved holds its group's guard object, and the guard is registered once. When every unsettled
 * member of a group is unreachable, the guard is collected and the members still in flight under
 * the same reservation are returned.
 */
const GUARD_GROUP_COUNT = 16;

/** What a collected group hands its members back to. */
export interface DropSink {
  returnDropped(entry: Entry, token: number): void;
}

const dropped = new FinalizationRegistry<{ sink: DropSink; members: (Entry | number | undefined)[] }>((held) => {
  const { sink, members } = held;
  for (let i = 0; i < members.length; i += 2) {
    const entry = members[i] as Entry | undefined;
    if (entry !== undefined) sink.returnDropped(entry, members[i + 1] as number);
  }
});

/** The current group of one queue's deliveries; a full or collected group starts a new one. */
export class DropGuards {
  #guard: WeakRef<Guard> | undefined;

  constructor(private readonly sink: DropSink) {}

  /**
   * Add a delivery of `entry` under `token` and return its group; its pair sits at the group's
   * last two members (`guard.members.length - 2`). No result object: this runs per delivery.
   */
  track(entry: Entry, token: number): Guard {
    let guard = this.#guard?.deref();
    if (!guard || guard.members.length >= 2 * GUARD_GROUP_COUNT) {
      guard = { members: [] };
      dropped.register(guard, { sink: this.sink, members: guard.members });
      this.#guard = new WeakRef(guard);
    }
    guard.members.push(entry, token);
    return guard;
  }
}
