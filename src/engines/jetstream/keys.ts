// Idempotency keys that outlive a restart of the server. A keyed push is published under a message
// id made of the key, so the queue stream drops a repeat within its duplicate window; but a server
// rebuilds that map at start from the messages it still holds, and a work-queue stream no longer
// holds what was acked; and a delayed item waits on another subject, and moves. So keys are also
// kept in the key stream (one record per key, kept for the window): a keyed push looks there first
// (a key found resolves with its seq and stores nothing), records its key once stored, and an item
// with a key has it recorded again before it is acked or moved into the dead letters (for a
// producer that died between its publish and its record).
import { headers } from '@nats-io/transport-node';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Delivery } from './message.js';
import type { Requester } from './request.js';

/** The header a key record carries: the queue stream's creation time, which tells its incarnation. */
const STREAM_CREATED_HEADER = 'Pq-Stream-Created';
/** The header that carries a key's message id on a message published under another id. @internal */
export const KEY_HEADER = 'Pq-Key';

/**
 * The message id an idempotency key is published under: the key percent-encoded (a header value
 * is trimmed and may not hold a line break, so `'a '` would otherwise be `'a'`), then `:key`. Ids
 * that `forward()` publishes into a stream end in `:<seq>`, digits, so the two never meet.
 * @internal
 */
export function keyMessageId(key: string): string {
  return `${encodeURIComponent(key)}:key`;
}

/** The key's message id a delivered message carries, or undefined. */
function keyIdOf(delivery: Delivery): string | undefined {
  const h = delivery.msg.headers;
  if (h === undefined) return undefined;
  const id = h.get('Nats-Msg-Id');
  if (id.endsWith(':key')) return id;
  const carried = h.get(KEY_HEADER);
  return carried === '' ? undefined : carried;
}

/** @internal */
export interface KeySettings {
  readonly requester: Requester;
  readonly jsm: JetStreamManager;
  readonly keyStream: string;
  /** Records are published on `<keySubject>.<token>`. */
  readonly keySubject: string;
  readonly streamCreated: string;
  readonly timeoutMs: number;
}

/** @internal */
export class KeyRecords {
  readonly #s: KeySettings;

  constructor(settings: KeySettings) {
    this.#s = settings;
  }

  /** A subject token for a message id: base64url, which holds no dot, wildcard or space. */
  #subjectOf(keyId: string): string {
    return `${this.#s.keySubject}.${Buffer.from(keyId, 'utf8').toString('base64url')}`;
  }

  /**
   * The seq the key's item had when it was acked, or undefined when the key stream has no record
   * of it (for this incarnation of the queue stream). Rejects when the server does not answer.
   */
  async seqOf(keyId: string): Promise<number | undefined> {
    const msg = await this.#s.jsm.streams.getMessage(this.#s.keyStream, { last_by_subj: this.#subjectOf(keyId) });
    if (msg === null || msg.header?.get(STREAM_CREATED_HEADER) !== this.#s.streamCreated) return undefined;
    const seq = Number(new TextDecoder().decode(msg.data));
    return Number.isSafeInteger(seq) && seq > 0 ? seq : undefined;
  }

  /** Record that the key's item has `seq`; resolves once the server stored the record. */
  record(keyId: string, seq: number): Promise<void> {
    const h = headers();
    h.set(STREAM_CREATED_HEADER, this.#s.streamCreated);
    // A second record of a key replaces the first (one per subject), so a resend does no harm.
    return this.#s.requester
      .publish(this.#subjectOf(keyId), new TextEncoder().encode(String(seq)), {
        headers: h,
        deadline: performance.now() + this.#s.timeoutMs,
        resend: true,
      })
      .then(() => undefined);
  }

  /**
   * Record the key of a delivered item before it is acked or moved: a promise that resolves once
   * the server stored the record, or undefined for an item without a key (nothing to wait for:
   * a plain ack pays nothing for keys).
   */
  remember(delivery: Delivery, seq: number): Promise<void> | undefined {
    const keyId = keyIdOf(delivery);
    return keyId === undefined ? undefined : this.record(keyId, seq);
  }
}
