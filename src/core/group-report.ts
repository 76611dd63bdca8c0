// The owner's report of its groups (the endpoint's GROUPS request, FORMAT.md §15): the groups with
// items in flight or waiting aside, busiest first, at most `limit` of them, and how many there are
// in all. It walks the groups active now once and keeps the busiest in a heap of `limit` entries:
// its time follows the groups active now, its memory and its answer the limit, never the number of
// groups a queue has seen.
import type { GroupGate } from './groups.js';
import { Heap } from './heap.js';
import type { RateLimit, RateLimiter } from './rate-limit.js';

/** One group, as the owner reports it. */
export interface GroupFigures {
  readonly group: string;
  /** Its items in flight now, whoever holds them. */
  readonly inFlight: number;
  /** Its items waiting aside because the group is at a consumer's `groupConcurrency`. */
  readonly groupLimited: number;
  /** Its items waiting aside for its rate window (`Builder.rateLimit` by group). */
  readonly rateLimited: number;
  /** Ms until its rate window has room again (by group): 0 when it has now, or when no limit by group applies. */
  readonly rateWaitMs: number;
}

/** What the owner reports of its groups. */
export interface GroupReport {
  /** Groups with items in flight or waiting aside now. */
  readonly total: number;
  /** The busiest of them (items in flight and waiting aside), at most the limit asked for; ties by name. */
  readonly groups: GroupFigures[];
  /** Items of every group in flight, waiting for a group's concurrency and waiting for a group's rate window. */
  readonly inFlight: number;
  readonly groupLimited: number;
  readonly rateLimited: number;
  /** The queue's rate limit, or null for none. */
  readonly rateLimit: RateLimit | null;
  /** Under a limit for the queue: ms until its window has room (0: it has now); null otherwise. */
  readonly queueRateWaitMs: number | null;
}

/** What the owner's STATS carries of its groups: two counts, kept as items come and go (no walk). */
export interface GroupSummary {
  /** Groups with items in flight. */
  readonly busy: number;
  /** Groups with items waiting for their concurrency limit. */
  readonly waiting: number;
}

interface Candidate {
  readonly group: string;
  readonly inFlight: number;
  readonly groupLimited: number;
  readonly rateLimited: number;
}

const activity = (c: Candidate): number => c.inFlight + c.groupLimited + c.rateLimited;

/** `a` is less busy than `b` (and so leaves the heap of the busiest first): fewer items, or as many and a later name. */
function lessBusy(a: Candidate, b: Candidate): boolean {
  const x = activity(a);
  const y = activity(b);
  return x < y || (x === y && a.group > b.group);
}

/** The report of the groups `gate` and `limiter` hold now, the busiest `limit` (a positive integer) listed. */
export function groupReport(gate: GroupGate, limiter: RateLimiter | undefined, limit: number): GroupReport {
  const byGroup = limiter?.byGroup ? limiter : undefined;
  const kept = new Heap<Candidate>(lessBusy);
  let total = 0;
  let inFlight = 0;
  let groupLimited = 0;
  let rateLimited = 0;
  const consider = (c: Candidate): void => {
    total++;
    inFlight += c.inFlight;
    groupLimited += c.groupLimited;
    rateLimited += c.rateLimited;
    if (kept.size < limit) kept.push(c);
    else if (lessBusy(kept.peek()!, c)) {
      kept.pop();
      kept.push(c);
    }
  };
  for (const [group, n, parked] of gate.active())
    consider({ group, inFlight: n, groupLimited: parked, rateLimited: byGroup?.parkedOf(group) ?? 0 });
  // Groups whose only items wait for their rate window: the walk above did not meet them.
  if (byGroup !== undefined) {
    for (const [group, parked] of byGroup.parkedGroups()) {
      if (gate.inFlight(group) <= 0 && gate.parkedOf(group) === 0) consider({ group, inFlight: 0, groupLimited: 0, rateLimited: parked });
    }
  }
  const groups: GroupFigures[] = new Array(kept.size);
  for (let i = kept.size - 1; i >= 0; i--) {
    const c = kept.pop()!;
    groups[i] = { ...c, rateWaitMs: byGroup?.waitMs(c.group) ?? 0 };
  }
  return {
    total,
    groups,
    inFlight,
    groupLimited,
    rateLimited,
    rateLimit: limiter === undefined ? null : { ...limiter.limit },
    queueRateWaitMs: limiter !== undefined && !limiter.byGroup ? limiter.waitMs(undefined) : null,
  };
}

/** The counts of the owner's STATS. */
export function groupSummary(gate: GroupGate): GroupSummary {
  return { busy: gate.busyGroups, waiting: gate.waitingGroups };
}
