/**
 * `persistent-queue/testing`: the simulated crash disk and the seeded PRNG, for property-testing
 * crash recovery (ours and yours). See ./crash-fs.ts for the fault model it injects.
 */

export {
  CrashFileSystem,
  formatCrashPoint,
  parseCrashPoint,
  type CrashFileSystemOptions,
  type CrashFsError,
  type CrashFsStats,
  type CrashOptions,
  type CrashPoint,
  type CrashPointsOptions,
  type ErrnoCode,
  type FaultCall,
  type FaultHandle,
  type FaultOp,
  type FaultRule,
  type TraceEntry,
} from './crash-fs.js';
export { Prng, formatSeed, parseSeed, seedFromEnv, withReproduction } from './prng.js';
export { ManualClock } from './manual-clock.js';
export type { Clock } from '../lib/clock.js';
export type { FileStat, FileSystem, LockHandle, OpenMode } from '../fs/file-system.js';
