/**
 * What the conformance suites (./suite.ts, ./scheduling.ts) share: skipping
 * through the runner's context, payload text, and reading a store or draining a queue whole.
 */
import type { Consumer } from '../core/builder.js';
import type { Store, StoredItem } from '../contract/store.js';

/** Skip the running test through its context; true when skipped. */
export function skipped(context: unknown, reason: string): boolean {
  const skip = (context as { skip?: (note?: string) => void } | null | undefined)?.skip;
  if (typeof skip !== 'function')
    throw new Error(`${reason}, and the test runner gave this test no context.skip(): leave the hook out instead`);
  skip.call(context, reason);
  return true;
}

export const bytesOf = (text: string): Uint8Array => new TextEncoder().encode(text);
export const textOf = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

/** Every unacked item the store returns in `(after, before)`, at most `limit`. */
export async function readAll<S extends Store>(
  store: S,
  after = 0,
  before = Number.MAX_SAFE_INTEGER,
  limit = 1_000_000,
): Promise<StoredItem[]> {
  return [...(await store.read({ after, before, limit }))];
}

/** Drain every ready item through the queue, acking each; returns payload texts in delivery order. */
export async function drain(rx: Consumer): Promise<string[]> {
  const out: string[] = [];
  for (;;) {
    // An asynchronous store may answer null while a read is out: wait while items are ready.
    const item = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null);
    if (!item) return out;
    out.push(textOf(item.bytes));
    await item.ack();
  }
}
