/**
 * Public entry of the durable store: {@link LogStore} over the node:fs {@link FileSystem} by default.
 * This module installs `nodeFileSystem` as LogStore's default file system, so that nothing under
 * `src/log` imports node:fs.
 */
import { LogStore as Engine, setDefaultFileSystem } from './log/log-store.js';
import { nodeFileSystem } from './node-fs.js';

setDefaultFileSystem(nodeFileSystem);

/**
 * The durable Store: a segmented write-ahead log plus an ack cursor (DESIGN.md, FORMAT.md).
 * `const store = await LogStore.open(dir, options)`, then hand it to `new Builder(store)`.
 *
 * Bound here (not re-exported) on purpose: the package declares `sideEffects: false`, and a bundler
 * may skip evaluating a module that only re-exports; using this binding evaluates this module, so
 * the default FileSystem is always installed.
 */
export const LogStore: typeof Engine = Engine;
export type LogStore = Engine;

export {
  MIN_SEGMENT_BYTES,
  type CompactionResult,
  type LogStoreOptions,
  type LogStoreRecoveryInfo,
  type LogStoreStats,
} from './log/log-store.js';
export type { FileSystem, FileStat, LockHandle, OpenMode } from './log/file-system.js';
export { nodeFileSystem } from './node-fs.js';
export { verifyStore, type VerifyOptions, type VerifyProblem, type VerifyResult } from './log/verify.js';
