/**
 * persistent-queue/jetstream: the queue's Producer, Consumer and Reserved over a NATS JetStream
 * stream, for many producers and consumers in many processes on many machines. The server keeps
 * the items (a work-queue stream), their order and their delivery counts (a durable pull
 * consumer); this module gives them the embedded queue's calls, argument checks and errors. It
 * also has `forward()`, which drains a local queue into a stream (store-and-forward).
 * See docs/guides/scaling-out.md, "When one machine is not enough", and docs/internals/jetstream.md, "The JetStream queue" and
 * "Store-and-forward".
 */
export { JetStreamBuilder, type JetStreamQueueOptions } from './builder.js';
export { JetStreamConsumer } from './handles.js';
export { JetStreamProducer } from './producer.js';
export { JetStreamReserved } from './reserved.js';
export type { JetStreamQueueStats } from './stats.js';
export { JetStreamDeadLetters } from './dead-letters.js';
export type { JetStreamProcessHandler, JetStreamProcessOptions } from './process.js';
export { forward, messageId } from './forward.js';
export { DURABILITY_WARNING_CODE } from './durability.js';
export type { JetStreamDurability, ServerSyncInterval, Survives } from './durability.js';
export type { ForwardOptions, ForwardStats, ForwardStreamConfig, ForwardTarget, Forwarder } from './forward.js';
