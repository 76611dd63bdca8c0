/**
 * Errors with stable codes. Messages may change between versions; codes may not.
 * Each code has its own heading in docs/reference/errors.md.
 */

/** Every code a {@link QueueError} can carry. */
export type QueueErrorCode =
  | 'ERR_CLOSED'
  | 'ERR_ALREADY_SETTLED'
  | 'ERR_LEASE_EXPIRED'
  | 'ERR_TOO_LARGE'
  | 'ERR_STORE'
  | 'ERR_STORE_FAILED'
  | 'ERR_STORE_FULL'
  | 'ERR_CORRUPT'
  | 'ERR_UNSUPPORTED_VERSION'
  | 'ERR_LOCKED'
  | 'ERR_NOT_FOUND'
  | 'ERR_READ_ONLY'
  | 'ERR_EXISTS'
  | 'ERR_UNSUPPORTED'
  | 'ERR_ENCODE'
  | 'ERR_INVALID'
  | 'ERR_SET_MISMATCH'
  | 'ERR_KEYS_FULL'
  | 'ERR_OWNER_GONE';

/** Codes an {@link OpenError} can carry. */
export type OpenErrorCode = 'ERR_STORE' | 'ERR_CORRUPT' | 'ERR_UNSUPPORTED_VERSION' | 'ERR_LOCKED' | 'ERR_NOT_FOUND';

export interface QueueErrorOptions {
  cause?: unknown;
  /** File the error is about, for storage errors. */
  file?: string;
  /** Byte offset inside {@link QueueErrorOptions.file}. */
  offset?: number;
}

/** An operational error of the queue or its store. `code` is stable. */
export class QueueError extends Error {
  readonly code: QueueErrorCode;
  readonly file: string | undefined;
  readonly offset: number | undefined;

  constructor(code: QueueErrorCode, message: string, options: QueueErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'QueueError';
    this.code = code;
    this.file = options.file;
    this.offset = options.offset;
  }
}

/** A store could not be opened. Opening never changes a byte on disk when it fails with this. */
export class OpenError extends QueueError {
  declare readonly code: OpenErrorCode;

  constructor(code: OpenErrorCode, message: string, options: QueueErrorOptions = {}) {
    super(code, message, options);
    this.name = 'OpenError';
  }
}

/** True when `error` is a {@link QueueError} with the given code. */
export function isQueueError(error: unknown, code?: QueueErrorCode): error is QueueError {
  return error instanceof QueueError && (code === undefined || error.code === code);
}
