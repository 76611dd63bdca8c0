// Acked messages that a crash of the server brought back. nats-server 2.9 writes a consumer's acks
// and a work-queue stream's deletes on their own schedules; SIGKILLed halfway through a backlog,
// it came back with the consumer's ack floor at the end of the backlog while the stream still
// held a third of it. The consumer never delivers those messages again (they are below its ack
// floor), but they hold storage, count against the stream's limits, and a consumer created
// afterwards would deliver them. So at open, at each reconnect and when the consumer elects a
// leader, the stream is checked: what is on the queue's subject at or below the ack floor was
// acked, and is removed, never anything above the floor. Messages acked out of order above the
// floor are covered once the floor passes them: after a check that finds the floor below the last
// seq delivered at that check, another follows one ack wait later, until the floor has passed
// that seq.
//
// How they are removed matters on 2.9.10: a purge filtered by subject also drops the consumer's
// pending acks above the floor (its ack floor jumps to the stream's last seq), so items in flight
// at the crash would never be delivered again. A stream that takes only the queue's subject is
// compacted instead (a purge by seq alone, which keeps them); one that takes other subjects too
// has each message at or below the floor read and deleted when it is on the queue's subject.
import type { JetStreamManager } from '@nats-io/jetstream';

/** One consumer whose acked messages are checked for. @internal */
export interface SweepTarget {
  readonly stream: string;
  readonly consumer: string;
  /** The subject it delivers. */
  readonly subject: string;
  /** True when the stream takes no other subject: it may be compacted up to the floor. */
  readonly onlySubject: boolean;
}

/** How many deletes of single messages are in flight at once. */
const DELETES_IN_FLIGHT = 32;

/** @internal */
export interface SweepSettings {
  readonly jsm: JetStreamManager;
  readonly targets: readonly SweepTarget[];
  /** Rejects when the connection is lost: a check under way then ends (the reconnect starts another). */
  readonly lost: () => Promise<never>;
  /** How long after a check that left work for later the next one runs. */
  readonly againAfterMs: number;
}

/** @internal */
export class Sweeper {
  readonly #s: SweepSettings;
  #running: Promise<void> | undefined;
  #again: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  /** Per stream, the last seq its consumer had delivered at the check that followed an event: later checks run until the floor passes it. */
  readonly #targets = new Map<string, number>();
  /** Messages purged so far. */
  purged = 0;

  constructor(settings: SweepSettings) {
    this.#s = settings;
  }

  /**
   * Check now, after an event that may have brought acked messages back (open, a reconnect, a
   * leader change). Never rejects: a failed check is made again one ack wait later.
   */
  sweep(): Promise<void> {
    this.#targets.clear();
    return this.#run();
  }

  /** One check at a time; a call while one runs waits for it. */
  #run(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#running ??= Promise.race([this.#check(), this.#s.lost()])
      .catch(() => true)
      .then((more) => {
        this.#running = undefined;
        if (more) this.#later();
      });
    return this.#running;
  }

  close(): void {
    this.#closed = true;
    if (this.#again !== undefined) clearTimeout(this.#again);
    this.#again = undefined;
  }

  #later(): void {
    if (this.#closed || this.#again !== undefined) return;
    this.#again = setTimeout(() => {
      this.#again = undefined;
      void this.#run();
    }, this.#s.againAfterMs);
    this.#again.unref();
  }

  /** Remove what each consumer's ack floor covers; true when a later check is needed. */
  async #check(): Promise<boolean> {
    const { jsm } = this.#s;
    let more = false;
    for (const t of this.#s.targets) {
      const info = await jsm.consumers.info(t.stream, t.consumer);
      const floor = info.ack_floor.stream_seq;
      const target = this.#targets.get(t.stream) ?? info.delivered.stream_seq;
      this.#targets.set(t.stream, target);
      if (floor < target) more = true;
      // A purge up to seq 1 would be a purge of everything: nothing is acked yet anyway.
      if (floor < 1) continue;
      const state = (await jsm.streams.info(t.stream)).state;
      if (state.messages === 0 || state.first_seq > floor) continue;
      if (t.onlySubject) this.purged += (await jsm.streams.purge(t.stream, { seq: floor + 1 })).purged;
      else this.purged += await this.#deleteEach(t, state.first_seq, floor);
    }
    return more;
  }

  /** Delete each message from `first` to `floor` that is on the target's subject; how many were. */
  async #deleteEach(t: SweepTarget, first: number, floor: number): Promise<number> {
    const { jsm } = this.#s;
    let next = first;
    let deleted = 0;
    const lane = async (): Promise<void> => {
      while (next <= floor && !this.#closed) {
        const seq = next++;
        const msg = await jsm.streams.getMessage(t.stream, { seq });
        if (msg === null || msg.subject !== t.subject) continue;
        if (await jsm.streams.deleteMessage(t.stream, seq, false)) deleted++;
      }
    };
    await Promise.all(Array.from({ length: Math.min(DELETES_IN_FLIGHT, floor - first + 1) }, lane));
    return deleted;
  }
}
