/**
 * Assertions at the storage boundary: a record is checked right before it is written and right
 * after it is read, so a bug shows where it happens instead of as damage found later. A failed
 * assertion fails the store instance (fail-stop) with this error as the cause; it never exits the
 * process. A plain function, not node:assert: it costs one branch on the hot path.
 */
export class StoreInvariantError extends Error {
  override readonly name = 'StoreInvariantError';
}

export function assertStore(condition: boolean, what: string): asserts condition {
  if (!condition) invariantViolated(what);
}

/**
 * The failing half of {@link assertStore}, for hot paths: `if (bad) invariantViolated(message)`
 * builds a message that names values only when the check fails, instead of on every call.
 */
export function invariantViolated(what: string): never {
  throw invariantError(what);
}

/** The error of a violated invariant, for a path that fails the store with it rather than throws. */
export function invariantError(what: string): StoreInvariantError {
  return new StoreInvariantError(`LogStore invariant violated: ${what}`);
}
