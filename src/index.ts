/** persistent-queue: a durable, at-least-once, multi-producer / single-consumer queue. */
export { Builder, Producer, Consumer, Reserved, Durability, AckDurability } from './core/builder.js';
export type {
  BatchHandler,
  BatchOptions,
  LazyAckOptions,
  PushOptions,
  PushValue,
  ReserveManyOptions,
  ReserveOptions,
  ProcessOptions,
  WaitOptions,
  QueueStats,
  IdempotencyOptions,
  RateLimitBy,
  RateLimitOptions,
  CatchUp,
  ScheduleInfo,
  ScheduleOptions,
  ScheduleSpec,
} from './core/builder.js';
export type { HandlerContext, HandlerErrorInfo, NackOptions, ProcessHandler, WorkerOptions } from './core/builder.js';
export type { Answer, QueueConsumer, QueueDeadLetters, QueueItem, QueueProducer, QueueStatsCommon } from './api/handles.js';
export type { DeadLetterQueue, DeadLetterListOptions, DeadLetterSelection } from './core/builder.js';
export type { CustomRetry, ExponentialRetry, FixedRetry, RetryDelayFunction, RetryPolicy, RetryPolicyInput } from './core/builder.js';
export { MemStore } from './stores/mem/index.js';
export { describeSchedules } from './core/schedules.js';
export { connect, type ConnectOptions } from './remote/connect.js';
export { RemoteProducer } from './remote/producer.js';
export { effectivelyOnce } from './once/processed-set.js';
export type {
  EffectivelyOnce,
  EffectivelyOnceOptions,
  NotPromise,
  OnceHandler,
  ProcessedSet,
  SyncOnceHandler,
  TransactionalProcessedSet,
} from './once/processed-set.js';
export { LogProcessedSet, type LogProcessedSetOptions } from './once/log-processed-set.js';
export { bytes, json, structured, text, validated } from './lib/codec.js';
export type { Codec, CodecValue, SchemaOutput, StandardSchemaIssue, StandardSchemaResult, StandardSchemaV1 } from './lib/codec.js';
export type { MemStoreOptions } from './stores/mem/index.js';
export { QueueError, OpenError, isQueueError } from './contract/errors.js';
export type { QueueErrorCode, OpenErrorCode, QueueErrorOptions } from './contract/errors.js';
export type {
  Store,
  StoredItem,
  StoreRecovery,
  StoreFeatures,
  StoreUsage,
  ReadRange,
  DeliveryMark,
  DeadLetter,
  DeadLetterRange,
  Redrive,
  StoredKey,
  StoredSchedule,
  ScheduleFire,
} from './contract/store.js';
export {
  MAX_GROUP_BYTES,
  MAX_KEY_BYTES,
  MAX_REASON_BYTES,
  MAX_SCHEDULE_NAME_BYTES,
  MAX_SCHEDULE_SPEC_BYTES,
  PRIORITY_MAX,
  PRIORITY_MIN,
} from './contract/store.js';
export { channels } from './lib/diagnostics.js';
export type {
  ChannelMessages,
  QueueEventBase,
  PushMessage,
  ItemMessage,
  DeliverMessage,
  AckMessage,
  NackMessage,
  RetryMessage,
  DeadLetterMessage,
  FailStopMessage,
} from './lib/diagnostics.js';
export {
  LogStore,
  MIN_SEGMENT_BYTES,
  nodeFileSystem,
  verifyStore,
  salvageStore,
  type CompactionResult,
  type LogStoreOptions,
  type LogStoreRecoveryInfo,
  type LogStoreStats,
  type VerifyOptions,
  type VerifyProblem,
  type VerifyResult,
  type SalvageOptions,
  type SalvageResult,
  type SeqMapping,
  type DamagedRange,
  type SeqRange,
  type FileSystem,
  type FileStat,
  type LockHandle,
  type OpenMode,
} from './stores/log/index.js';
