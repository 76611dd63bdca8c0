/**
 * The optional peer `classic-level`: the part of its API LevelStore uses, how it is loaded, and
 * how its errors map to ours.
 */
import { OpenError } from '../../contract/errors.js';

const MISSING_PEER = 'LevelStore needs classic-level: npm install classic-level@3';

// The part of classic-level this store uses. Typed here, not imported, so that the peer does not
// have to be installed to type-check or to use the rest of the package.
export type BatchOp = { type: 'put'; key: Buffer; value: Uint8Array } | { type: 'del'; key: Buffer };
export interface LevelIterator {
  nextv(size: number): Promise<[Buffer, Buffer][]>;
  all(): Promise<[Buffer, Buffer][]>;
  close(): Promise<void>;
}
export interface LevelKeyIterator {
  nextv(size: number): Promise<Buffer[]>;
  close(): Promise<void>;
}
export interface LevelDatabase {
  open(options: { createIfMissing: boolean }): Promise<void>;
  get(key: Buffer): Promise<Buffer | undefined>;
  /** Whether each key is present, without copying its value out (classic-level 3 has it natively). */
  hasMany(keys: Buffer[]): Promise<boolean[]>;
  batch(ops: BatchOp[], options: { sync: boolean }): Promise<void>;
  iterator(options: {
    gt?: Buffer;
    gte?: Buffer;
    lt?: Buffer;
    lte?: Buffer;
    limit?: number;
    reverse?: boolean;
    snapshot?: LevelSnapshot;
  }): LevelIterator;
  keys(options: { gt?: Buffer; gte?: Buffer; lt: Buffer }): LevelKeyIterator;
  /** Values only, in key order; `nextv` pages as for keys. */
  values(options: { gt?: Buffer; lt: Buffer }): LevelKeyIterator;
  /** An explicit snapshot, which several reads can share (classic-level 3 has them). */
  snapshot(): LevelSnapshot;
  close(): Promise<void>;
}
export interface LevelSnapshot {
  close(): Promise<void>;
}
export type LevelConstructor = new (location: string, options: Record<string, unknown>) => LevelDatabase;

export async function loadPeer(): Promise<LevelConstructor> {
  const peer: string = 'classic-level';
  try {
    const mod = (await import(peer)) as { ClassicLevel?: LevelConstructor };
    if (typeof mod.ClassicLevel !== 'function') throw new Error('classic-level has no ClassicLevel export');
    return mod.ClassicLevel;
  } catch (e) {
    throw new OpenError('ERR_STORE', MISSING_PEER, { cause: e });
  }
}

export function levelCode(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The OpenError for a failure while opening `dir`. */
export function openError(dir: string, e: unknown): OpenError {
  if (e instanceof OpenError) return e;
  // classic-level reports a failed open as LEVEL_DATABASE_NOT_OPEN with the reason as `cause`.
  const codes = [levelCode(e), levelCode((e as { cause?: unknown } | null)?.cause)];
  if (codes.includes('LEVEL_LOCKED')) {
    return new OpenError('ERR_LOCKED', `Store ${dir} is locked by another process`, { cause: e, file: dir });
  }
  if (codes.includes('LEVEL_CORRUPTION')) {
    return new OpenError('ERR_CORRUPT', `Store ${dir} is damaged: ${message(e)}`, { cause: e, file: dir });
  }
  return new OpenError('ERR_STORE', `Cannot open store ${dir}: ${message(e)}`, { cause: e, file: dir });
}
