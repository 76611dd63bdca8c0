// Delayed items on JetStream, which has no message schedule before 2.12. A delayed push is
// stored at once in the queue stream, on `<subject>.delayed`, with its not-before time in a
// header. Every consumer process runs a mover on that subject's consumer: a message whose time
// has not come is returned with a nak delayed until then, so that the server holds it (across
// restarts of the server and deaths of movers) and no process does; one whose time has come is
// published again on the queue's subject, where it is an item like any other (its delivery count
// starts at 1, its seq the seq its push resolved with, which the copy carries in a header), then
// acked on the delayed subject. A mover that dies between the two publishes again when the
// message comes back, under the same message id, and the stream drops the copy within its
// duplicate window. The seqs stay unique: the item's is its first message's, which no other item
// has in the stream.
import { headers } from '@nats-io/transport-node';
import type { JetStreamCore } from './core.js';
import { KEY_HEADER } from './keys.js';
import type { Delivery } from './message.js';
import { Puller } from './puller.js';

/** The header of a delayed push: when it may be handed out, in ms since the epoch. @internal */
export const NOT_BEFORE_HEADER = 'Pq-Not-Before';
/** The header of an item that waited in the delayed stream: the seq its push resolved with. @internal */
export const DELAYED_SEQ_HEADER = 'Pq-Delayed-Seq';

/** Most messages a mover holds at once (being checked, published or returned). */
const MOVES_MAX = 64;
/**
 * The longest delay of one nak: a message not due for longer comes back after it and is returned
 * again. The server takes a delay in ns as a 64-bit integer (292 years), which the longest
 * delayMs (1e15 ms) would overflow.
 */
const NAK_MAX_MS = 24 * 3600_000;
/** How long a message whose move failed (the server unreachable) waits before it is tried again. */
const RETRY_MS = 1000;

/** The seq a delivered item was pushed under: the delayed stream's seq for an item that waited there. @internal */
export function itemSeqOf(delivery: Delivery): number {
  const carried = delivery.msg.headers?.get(DELAYED_SEQ_HEADER);
  const seq = carried === undefined || carried === '' ? NaN : Number(carried);
  return Number.isSafeInteger(seq) && seq > 0 ? seq : delivery.info.streamSeq;
}

/**
 * The message id of the copy of delayed item `seq`: the stream's name and creation time tell its
 * incarnation (a stream made again restarts its seqs). It holds colons, so it is never an id
 * `forward()` publishes (`<origin>:<seq>`, the origin without one), and ends in digits, never in
 * `:key`. @internal
 */
export function movedId(stream: string, created: string, seq: number): string {
  return `${stream}:${created}:${seq}`;
}

/** Moves delayed items into the queue stream as they fall due, for one open queue. @internal */
export class DelayedMover {
  readonly #core: JetStreamCore;
  readonly #puller: Puller;
  #started = false;
  #closed = false;
  #inHand = 0;

  constructor(core: JetStreamCore) {
    this.#core = core;
    const s = core.s;
    this.#puller = new Puller({
      nc: s.nc,
      watch: s.watch,
      requester: s.requester,
      apiPrefix: s.apiPrefix,
      stream: s.names.stream,
      consumer: s.names.delayedConsumer,
      expiresMs: s.pullExpiresMs,
      timeoutMs: s.timeoutMs,
      deliver: (delivery) => this.#move(delivery),
    });
  }

  /** Start moving (once): called when a consumer of this process first asks for items. */
  start(): void {
    if (this.#started || this.#closed || this.#core.s.noDelays !== undefined) return;
    this.#started = true;
    this.#puller.want(MOVES_MAX);
  }

  /** The server lost the waiting pulls (a restart, a leader change): ask again. */
  pullsLost(): void {
    if (this.#started) this.#puller.reset();
  }

  close(): void {
    this.#closed = true;
    this.#puller.close();
  }

  #move(delivery: Delivery): void {
    if (this.#closed) {
      delivery.nak(0).catch(() => {});
      return;
    }
    this.#inHand++;
    this.#puller.want(MOVES_MAX - this.#inHand);
    const done = (): void => {
      this.#inHand--;
      if (!this.#closed) this.#puller.want(MOVES_MAX - this.#inHand);
    };
    this.#core.track(this.#handle(delivery)).then(done, done);
  }

  async #handle(delivery: Delivery): Promise<void> {
    const notBefore = Number(delivery.msg.headers?.get(NOT_BEFORE_HEADER));
    // Not due yet: the server holds it until then. (A message without a readable time is due.)
    const waitMs = Number.isFinite(notBefore) ? notBefore - Date.now() : 0;
    if (waitMs > 0) {
      await delivery.nak(Math.min(waitMs, NAK_MAX_MS)).catch(() => {});
      return;
    }
    const core = this.#core;
    const { names, streamCreated } = core.s;
    const seq = delivery.info.streamSeq;
    const hdrs = headers();
    hdrs.set(DELAYED_SEQ_HEADER, String(seq));
    // The key goes with it: its ack records the key, as a plain keyed item's does.
    const id = delivery.msg.headers?.get('Nats-Msg-Id') ?? '';
    if (id.endsWith(':key')) hdrs.set(KEY_HEADER, id);
    try {
      await core.publish(names.subject, delivery.bytes, movedId(names.stream, streamCreated, seq), hdrs);
      await delivery.ackAck();
    } catch {
      // Tried again later; if even the nak is lost, the server delivers it again after its ack wait.
      await delivery.nak(RETRY_MS).catch(() => {});
    }
  }
}
