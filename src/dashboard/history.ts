/**
 * The charts' data, kept by the dashboard: the owner's counters sampled about once a second
 * (pushes, acks, redeliveries, dead letters per second over the last minutes), and the owner's
 * latency buckets (src/remote/timings.ts) as it last answered. Bounded: {@link HISTORY_SECONDS}
 * samples whatever runs how long.
 */
import type { TimingBucket, Timings } from '../remote/timings.js';

/** Seconds of counter samples kept. */
export const HISTORY_SECONDS = 300;

/** The owner's cumulative counters the throughput chart is made of (QueueStats names). */
export const RATE_COUNTERS = ['pushed', 'acked', 'redelivered', 'deadLettered'] as const;
export type RateCounter = (typeof RATE_COUNTERS)[number];

interface Sample {
  /** Ms since the epoch. */
  readonly at: number;
  readonly values: Readonly<Record<RateCounter, number>>;
}

/** One point of the throughput chart: per-second rates between two samples, at the later one. */
export interface RatePoint {
  readonly at: number;
  readonly pushed: number;
  readonly acked: number;
  readonly redelivered: number;
  readonly deadLettered: number;
}

export class RateHistory {
  #samples: Sample[] = [];
  /** Which queue the samples are of: an owner that reopened its queue counts from 0 again. */
  #source = '';

  /** Add the counters of `figures` (the owner's stats) sampled at `at`, from `source` (its pid and queue id). */
  add(source: string, at: number, figures: Record<string, unknown>): void {
    const values = {} as Record<RateCounter, number>;
    for (const name of RATE_COUNTERS) {
      const v = figures[name];
      values[name] = typeof v === 'number' && Number.isFinite(v) ? v : 0;
    }
    const last = this.#samples[this.#samples.length - 1];
    if (source !== this.#source || (last !== undefined && RATE_COUNTERS.some((n) => values[n] < last.values[n]))) {
      // Another queue, or the same one reopened: its counters do not continue these.
      this.#samples = [];
      this.#source = source;
    } else if (last !== undefined && at - last.at < 500) {
      // Asked again within half a second (two pages open): the earlier sample stands.
      return;
    }
    this.#samples.push({ at, values });
    const oldest = at - HISTORY_SECONDS * 1000;
    let drop = 0;
    while (drop < this.#samples.length - 1 && this.#samples[drop]!.at < oldest) drop++;
    if (drop > 0) this.#samples.splice(0, drop);
  }

  /** Forget every sample (nobody serves the queue now). */
  clear(): void {
    this.#samples = [];
    this.#source = '';
  }

  points(): RatePoint[] {
    const out: RatePoint[] = [];
    for (let i = 1; i < this.#samples.length; i++) {
      const a = this.#samples[i - 1]!;
      const b = this.#samples[i]!;
      const seconds = (b.at - a.at) / 1000;
      if (seconds <= 0) continue;
      const rate = (n: RateCounter): number => Math.round(((b.values[n] - a.values[n]) / seconds) * 10) / 10;
      out.push({
        at: b.at,
        pushed: rate('pushed'),
        acked: rate('acked'),
        redelivered: rate('redelivered'),
        deadLettered: rate('deadLettered'),
      });
    }
    return out;
  }
}

/** The latency chart's data: the owner's buckets as it last answered, or none. */
export interface LatencySeries {
  readonly since: number | null;
  readonly buckets: readonly TimingBucket[];
}

export function latencySeries(timings: Timings | null): LatencySeries {
  return timings === null ? { since: null, buckets: [] } : { since: timings.since, buckets: timings.buckets };
}
