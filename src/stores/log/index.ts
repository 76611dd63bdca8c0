/**
 * LogStore, the durable Store, as the package's main entry point offers it: the engine
 * (engine/) over node:fs with the owner's endpoint (log-store.ts), and the tools that read a store
 * directory (`verifyStore`, `salvageStore`).
 */
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
} from './log-store.js';
