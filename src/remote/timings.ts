// What the owner of a queue measures of its hand-outs and acks while a dashboard watches
// (docs/internals/dashboard.md, "The dashboard"): time from push to hand-out and from hand-out to
// ack, per second, for the last minutes. The endpoint's TIMINGS request (FORMAT.md §15) reads it.
//
// The queue keeps no timestamps of its own: the first delivery stays free. The samples come from
// its diagnostics channels (src/lib/diagnostics.ts), whose `push`, `deliver` and `ack` messages carry
// the item's seq. The channels cost nothing while nobody subscribes, so this subscribes only when
// asked and unsubscribes once nobody has asked for a while: a queue no dashboard watches pays
// nothing, a watched one pays a message object and a map update per event.
import diagnosticsChannel from 'node:diagnostics_channel';
import { channels, type ItemMessage, type PushMessage } from '../lib/diagnostics.js';

/** Seconds of samples kept: the charts show the last five minutes. */
export const TIMING_WINDOW_SECONDS = 300;

/**
 * Histogram bins per second and kind. Bin 0 holds durations under 1 µs; bin i (i >= 1) holds
 * [2^((i-1)/2), 2^(i/2)) µs, so a percentile read from it is within a factor of √2; bin 63 holds
 * everything from about 50 minutes on.
 */
const BINS = 64;

/** Items whose push (or hand-out) time is held while they wait for their hand-out (or ack). */
export const TRACKED_ITEMS_MAX = 100_000;

/**
 * Pushes (and hand-outs) timed per second at most: enough for the percentiles a chart shows, and a
 * bound on the collector's own work on a busy queue, where the channels' messages are the cost left.
 */
export const SAMPLES_PER_SECOND_MAX = 256;

/** Nobody asked for this long: the collector unsubscribes and drops what it held. */
export const WATCH_IDLE_MS = 30_000;

/** How often the idle check runs. */
const SWEEP_MS = 5_000;

/** One second's samples of one kind: durations in milliseconds. */
export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

export interface TimingBucket {
  /** The second's start, in ms since the epoch. */
  readonly at: number;
  /** Push to first hand-out, for items pushed while watched. */
  readonly handout: LatencySummary | null;
  /** Hand-out to ack, for hand-outs made while watched. */
  readonly ack: LatencySummary | null;
}

export interface Timings {
  /** When the owner began to watch (ms since the epoch): no sample is older. */
  readonly since: number;
  /** The seconds that hold samples, oldest first, up to {@link TIMING_WINDOW_SECONDS} back. */
  readonly buckets: TimingBucket[];
}

export interface TimingClock {
  /** Wall time, ms since the epoch: names the seconds. */
  readonly wall: () => number;
  /** Monotonic time, ms: measures the durations. */
  readonly mono: () => number;
}

const realClock: TimingClock = { wall: () => Date.now(), mono: () => performance.now() };

/** The bin of a duration of `ms` milliseconds. */
export function binOf(ms: number): number {
  const us = ms * 1000;
  if (!(us >= 1)) return 0;
  return Math.min(BINS - 1, 1 + Math.floor(2 * Math.log2(us)));
}

/** The upper bound of bin `bin`, in milliseconds. */
export function binUpperMs(bin: number): number {
  return 2 ** (bin / 2) / 1000;
}

/** One kind of sample (hand-out or ack) over the window: a histogram and a maximum per second. */
class SecondRing {
  readonly #seconds = new Float64Array(TIMING_WINDOW_SECONDS).fill(-1);
  readonly #bins = new Uint32Array(TIMING_WINDOW_SECONDS * BINS);
  readonly #counts = new Uint32Array(TIMING_WINDOW_SECONDS);
  readonly #max = new Float64Array(TIMING_WINDOW_SECONDS);

  add(second: number, ms: number): void {
    const slot = second % TIMING_WINDOW_SECONDS;
    if (this.#seconds[slot] !== second) {
      this.#seconds[slot] = second;
      this.#bins.fill(0, slot * BINS, (slot + 1) * BINS);
      this.#counts[slot] = 0;
      this.#max[slot] = 0;
    }
    this.#bins[slot * BINS + binOf(ms)]!++;
    this.#counts[slot]!++;
    if (ms > this.#max[slot]!) this.#max[slot] = ms;
  }

  summary(second: number): LatencySummary | null {
    const slot = second % TIMING_WINDOW_SECONDS;
    if (this.#seconds[slot] !== second || this.#counts[slot] === 0) return null;
    const count = this.#counts[slot]!;
    const max = this.#max[slot]!;
    const at = (q: number): number => {
      const rank = Math.ceil(q * count);
      let seen = 0;
      for (let b = 0; b < BINS; b++) {
        seen += this.#bins[slot * BINS + b]!;
        if (seen >= rank) return Math.min(binUpperMs(b), max);
      }
      return max;
    };
    return { count, p50: at(0.5), p90: at(0.9), p99: at(0.99), max };
  }
}

/** A map that forgets its oldest entries past `max`. */
function remember(map: Map<number, number>, seq: number, at: number): void {
  if (map.size >= TRACKED_ITEMS_MAX) map.delete(map.keys().next().value as number);
  map.set(seq, at);
}

/** How many of this second's events were chosen for timing. */
class SecondBudget {
  #second = -1;
  #taken = 0;

  take(second: number): boolean {
    if (second !== this.#second) {
      this.#second = second;
      this.#taken = 0;
    }
    if (this.#taken >= SAMPLES_PER_SECOND_MAX) return false;
    this.#taken++;
    return true;
  }
}

interface Watching {
  readonly since: number;
  readonly pushBudget: SecondBudget;
  readonly deliverBudget: SecondBudget;
  readonly handout: SecondRing;
  readonly ack: SecondRing;
  /** Push time of items not yet handed out, by seq. */
  readonly pushedAt: Map<number, number>;
  /** Hand-out time of items not yet settled, by seq. */
  readonly deliveredAt: Map<number, number>;
}

/**
 * The owner's timing samples of the queue `queueId()` names. Idle until `read()` is first called;
 * from then on subscribed, until nobody has called `read()` for {@link WATCH_IDLE_MS}.
 */
export class TimingCollector {
  readonly #queueId: () => number;
  readonly #clock: TimingClock;
  #id = 0;
  #watching: Watching | null = null;
  #lastRead = 0;
  #sweeper: ReturnType<typeof setInterval> | null = null;

  constructor(queueId: () => number, clock: TimingClock = realClock) {
    this.#queueId = queueId;
    this.#clock = clock;
  }

  /** True while subscribed to the queue's channels. */
  get watching(): boolean {
    return this.#watching !== null;
  }

  /** The samples held (starting to watch if idle). */
  read(): Timings {
    this.#lastRead = this.#clock.mono();
    const w = this.#watching ?? this.#start();
    const now = Math.floor(this.#clock.wall() / 1000);
    const first = Math.max(Math.floor(w.since / 1000), now - TIMING_WINDOW_SECONDS + 1);
    const buckets: TimingBucket[] = [];
    for (let second = first; second <= now; second++) {
      const handout = w.handout.summary(second);
      const ack = w.ack.summary(second);
      if (handout !== null || ack !== null) buckets.push({ at: second * 1000, handout, ack });
    }
    return { since: w.since, buckets };
  }

  /** Stop watching when nobody has read for {@link WATCH_IDLE_MS}. The sweep timer calls it. */
  sweep(): void {
    if (this.#watching !== null && this.#clock.mono() - this.#lastRead >= WATCH_IDLE_MS) this.stop();
  }

  /** Unsubscribe and drop every sample. Idempotent; a later `read()` starts again. */
  stop(): void {
    if (this.#watching === null) return;
    this.#watching = null;
    diagnosticsChannel.unsubscribe(channels.push, this.#onPush);
    diagnosticsChannel.unsubscribe(channels.deliver, this.#onDeliver);
    diagnosticsChannel.unsubscribe(channels.ack, this.#onAck);
    diagnosticsChannel.unsubscribe(channels.nack, this.#onSettled);
    diagnosticsChannel.unsubscribe(channels.deadLetter, this.#onSettled);
    if (this.#sweeper !== null) clearInterval(this.#sweeper);
    this.#sweeper = null;
  }

  #start(): Watching {
    this.#id = this.#queueId();
    const w: Watching = {
      since: this.#clock.wall(),
      pushBudget: new SecondBudget(),
      deliverBudget: new SecondBudget(),
      handout: new SecondRing(),
      ack: new SecondRing(),
      pushedAt: new Map(),
      deliveredAt: new Map(),
    };
    this.#watching = w;
    diagnosticsChannel.subscribe(channels.push, this.#onPush);
    diagnosticsChannel.subscribe(channels.deliver, this.#onDeliver);
    diagnosticsChannel.subscribe(channels.ack, this.#onAck);
    diagnosticsChannel.subscribe(channels.nack, this.#onSettled);
    diagnosticsChannel.subscribe(channels.deadLetter, this.#onSettled);
    this.#sweeper = setInterval(() => this.sweep(), SWEEP_MS);
    this.#sweeper.unref();
    return w;
  }

  readonly #onPush = (message: unknown): void => {
    const m = message as PushMessage;
    const w = this.#watching;
    if (w === null || m.queueId !== this.#id) return;
    const now = this.#clock.mono();
    if (w.pushBudget.take(Math.floor(now / 1000))) remember(w.pushedAt, m.seq, now);
  };

  readonly #onDeliver = (message: unknown): void => {
    const m = message as ItemMessage;
    const w = this.#watching;
    if (w === null || m.queueId !== this.#id) return;
    const now = this.#clock.mono();
    const pushedAt = w.pushedAt.get(m.seq);
    if (pushedAt !== undefined) {
      w.pushedAt.delete(m.seq);
      // The first hand-out only: a redelivery's wait is the retry's, not the queue's.
      if (m.deliveries === 1) w.handout.add(Math.floor(this.#clock.wall() / 1000), now - pushedAt);
    }
    if (w.deliverBudget.take(Math.floor(now / 1000))) remember(w.deliveredAt, m.seq, now);
  };

  readonly #onAck = (message: unknown): void => {
    const m = message as ItemMessage;
    const w = this.#watching;
    if (w === null || m.queueId !== this.#id) return;
    const deliveredAt = w.deliveredAt.get(m.seq);
    if (deliveredAt === undefined) return;
    w.deliveredAt.delete(m.seq);
    w.ack.add(Math.floor(this.#clock.wall() / 1000), this.#clock.mono() - deliveredAt);
  };

  readonly #onSettled = (message: unknown): void => {
    const m = message as ItemMessage;
    if (m.queueId === this.#id) this.#watching?.deliveredAt.delete(m.seq);
  };
}
