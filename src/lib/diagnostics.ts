/**
 * The queue's `node:diagnostics_channel` channels: their names, the message each one carries, and
 * the channel objects the core publishes on.
 *
 * The names follow the convention of undici and Node itself (`<package>:<event>`), so a subscriber
 * needs nothing from this package but the strings: `diagnostics_channel.subscribe(name, fn)`.
 * The core publishes only while a channel has subscribers (`channel.hasSubscribers`) and builds
 * no message otherwise, so a queue nobody watches pays nothing but that check.
 *
 * A message never carries the payload: queue payloads may be sensitive and are never logged by
 * default, and the bytes a consumer is handed are a view that a subscriber could hold on to or
 * modify. Messages give the item's `seq`, its `byteLength` and, once it was delivered, its
 * `deliveries`. Every message names its queue: `queueId` (unique within the process, in open
 * order, also in `stats().queueId`) and `store` (the store's class name).
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import type { QueueError } from '../contract/errors.js';

/** The channel names, one per event. */
export const channels = {
  /** An item's push resolved: it is stored under the durability policy. One message per item, `pushMany` included. */
  push: 'persistent-queue:push',
  /** An item was handed to the consumer (every delivery, redeliveries included). */
  deliver: 'persistent-queue:deliver',
  /** An item's ack resolved: its removal is stored under the ack policy (`Builder.ackDurability`). */
  ack: 'persistent-queue:ack',
  /** An item was nacked (`nack()`, a throwing `process()` handler, an `await using` scope left unacked). */
  nack: 'persistent-queue:nack',
  /** A redelivery: an item delivered before (then nacked or returned) is handed to the consumer again. */
  retry: 'persistent-queue:retry',
  /** An item was moved to the dead-letter queue (`maxDeliveries`, `item.deadLetter()`); the move is stored. */
  deadLetter: 'persistent-queue:dead-letter',
  /** The queue instance failed (fail-stop): every pending and later operation rejects with `error`. */
  failStop: 'persistent-queue:fail-stop',
} as const;

/** What every message carries: which queue it is about. */
export interface QueueEventBase {
  /** Unique per open queue within the process, in open order from 1; also `stats().queueId`. */
  readonly queueId: number;
  /** The class name of the queue's store (`'LogStore'`, `'MemStore'`, ...). */
  readonly store: string;
}

/** `persistent-queue:push`. */
export interface PushMessage extends QueueEventBase {
  readonly seq: number;
  /** Payload length in bytes. */
  readonly byteLength: number;
}

/** `persistent-queue:deliver`, `:ack`, `:nack`, `:retry` and `:dead-letter`. */
export interface ItemMessage extends QueueEventBase {
  readonly seq: number;
  /** Payload length in bytes. */
  readonly byteLength: number;
  /** Deliveries of the item in this process so far, the current one included (2 or more on `retry`). */
  readonly deliveries: number;
}

export type DeliverMessage = ItemMessage;
export type AckMessage = ItemMessage;
export type NackMessage = ItemMessage;
export type RetryMessage = ItemMessage;
/** `persistent-queue:dead-letter`. */
export interface DeadLetterMessage extends ItemMessage {
  /** Why: the last handler error, or the reason given to `item.deadLetter()` (never the payload). */
  readonly reason: string;
}

/** `persistent-queue:fail-stop`. */
export interface FailStopMessage extends QueueEventBase {
  /** The `ERR_STORE_FAILED` error every operation now rejects with; its `cause` is the store's error. */
  readonly error: QueueError;
}

/** The message type of each channel, by channel name. */
export interface ChannelMessages {
  'persistent-queue:push': PushMessage;
  'persistent-queue:deliver': DeliverMessage;
  'persistent-queue:ack': AckMessage;
  'persistent-queue:nack': NackMessage;
  'persistent-queue:retry': RetryMessage;
  'persistent-queue:dead-letter': DeadLetterMessage;
  'persistent-queue:fail-stop': FailStopMessage;
}

/**
 * The channel objects the core publishes on, held for the life of the process (Node keeps its
 * registry of channels by name weakly).
 * @internal
 */
export const pushChannel = diagnosticsChannel.channel(channels.push);
/** @internal */
export const deliverChannel = diagnosticsChannel.channel(channels.deliver);
/** @internal */
export const ackChannel = diagnosticsChannel.channel(channels.ack);
/** @internal */
export const nackChannel = diagnosticsChannel.channel(channels.nack);
/** @internal */
export const deadLetterChannel = diagnosticsChannel.channel(channels.deadLetter);
/** @internal */
export const retryChannel = diagnosticsChannel.channel(channels.retry);
/** @internal */
export const failStopChannel = diagnosticsChannel.channel(channels.failStop);
