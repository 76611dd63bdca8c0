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
// at the crash would never be delivered again; and a purge by seq alone would take the delayed
// items below the floor with it (they share the stream, under another consumer). So each message
// on the consumer's subject at or below its floor is found (a read of the next message on the
// subject from a seq on) and deleted, one by one.
import type { JetStreamManager, MsgRequest } from '@nats-io/jetstream';

/** One consumer whose acked messages are checked for. @internal */
export interface SweepTarget {
  readonly consumer: string;
  /** The subject it delivers. */
  readonly subject: string;
}

/** How many deletes of single messages are in flight at once. */
const DELETES_IN_FLIGHT = 32;

/** @internal */
export interface SweepSettings {
  readonly jsm: JetStreamManager;
  readonly stream: string;
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
  /** Per consumer, the last seq it had delivered at the check that followed an event: later checks run until the floor passes it. */
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
    const { jsm, stream } = this.#s;
    let more = false;
    for (const t of this.#s.targets) {
      const info = await jsm.consumers.info(stream, t.consumer);
      const floor = info.ack_floor.stream_seq;
      const target = this.#targets.get(t.consumer) ?? info.delivered.stream_seq;
      this.#targets.set(t.consumer, target);
      if (floor < target) more = true;
      if (floor >= 1) this.purged += await this.#deleteUpTo(t.subject, floor);
    }
    return more;
  }

  /** Delete every message on `subject` at or below `floor`; how many were. */
  async #deleteUpTo(subject: string, floor: number): Promise<number> {
    const { jsm, stream } = this.#s;
    const deletes = new Set<Promise<unknown>>();
    let deleted = 0;
    for (let from = 1; from <= floor && !this.#closed; ) {
      // The first message on the subject from `from` on (servers from 2.9; the client's type leaves it out).
      const msg = await jsm.streams.getMessage(stream, { next_by_subj: subject, seq: from } as unknown as MsgRequest);
      if (msg === null || msg.seq > floor) break;
      const d = jsm.streams.deleteMessage(stream, msg.seq, false).then((ok) => {
        if (ok) deleted++;
      });
      deletes.add(d);
      void d.finally(() => deletes.delete(d)).catch(() => {});
      if (deletes.size >= DELETES_IN_FLIGHT) await Promise.race(deletes);
      from = msg.seq + 1;
    }
    await Promise.all(deletes);
    return deleted;
  }
}
