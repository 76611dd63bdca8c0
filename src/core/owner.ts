// The OwnerSurface a queue offers to other processes and threads (src/contract/owner-surface.ts): built by
// the Builder at open for a store that serves others (`Store.attach`). Payloads arrive encoded
// (a remote producer runs the codec on its side), so pushes go to the core as bytes.
import type { OwnerSurface, RemotePushOptions, RemoteSelection } from '../contract/owner-surface.js';
import type { QueueCore } from './queue-core.js';
import { pushMeta } from './entry.js';
import type { Consumer } from './handles.js';

/** What a store that serves others may also offer the surface (LogStore does). */
interface ServingStore {
  readonly dir?: unknown;
  compact?(): Promise<unknown>;
  inspect?(): object;
}

/** The surface of the queue `core` (whose consumer is `rx`) over the store in `dir`. @internal */
export function ownerSurface(core: QueueCore, rx: Consumer<unknown>, dir: string): OwnerSurface {
  const store = core.store as unknown as ServingStore;
  return {
    dir,
    maxItemBytes: core.store.maxItemBytes,
    push(payloads: Uint8Array[], options: RemotePushOptions, signal: AbortSignal | undefined): Promise<number[]> {
      const meta = pushMeta(options.priority ?? 0, options.notBefore ?? 0, undefined);
      if (options.keys !== undefined) return core.pushManyKeyed(payloads, [...options.keys], signal, meta);
      return core.push(payloads, false, signal, meta) as Promise<number[]>;
    },
    stats() {
      const schedules = core.schedules;
      return {
        ...core.stats(),
        store: typeof store.inspect === 'function' ? store.inspect() : undefined,
        groups: core.groupSummary(),
        ...(schedules !== undefined ? { schedules: { count: schedules.size } } : {}),
      };
    },
    groups: (limit: number) => core.groupReport(limit),
    schedules: (after: string, limit: number) => core.schedules?.page(after, limit),
    listDeadLetters: (after: number, limit: number) => rx.deadLetters.list({ after, limit }),
    redrive: (selection: RemoteSelection) => rx.deadLetters.redrive(selection as never) as Promise<number[]>,
    purge: (selection: RemoteSelection) => rx.deadLetters.purge(selection as never) as Promise<number>,
    compact: () => (typeof store.compact === 'function' ? store.compact() : Promise.resolve(undefined)),
    get consuming() {
      return core.consuming;
    },
    ingest: (file, records) => core.ingest(file, records),
  };
}
