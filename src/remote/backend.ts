// How a producer in another process or thread reaches a queue: through the owner's endpoint
// (./client.ts) when a process has the queue open, through the spool (../stores/log/engine/spool-producer.ts)
// when none does. `connect()` picks one and wraps it in the Producer interface.
import type { Durability } from '../api/types.js';
import type { RemotePushOptions } from '../contract/owner-surface.js';

export interface ProducerBackend {
  /** Which door the pushes go through. */
  readonly mode: 'endpoint' | 'spool';
  /**
   * Store the payloads (already encoded, validated, each within the store's size limit) as one
   * batch; resolves with their seqs, or with 0 for each through the spool (the owner gives seqs
   * when it ingests them). The signal withdraws a push still waiting for capacity.
   */
  pushMany(payloads: Uint8Array[], options: RemotePushOptions, signal: AbortSignal | undefined): Promise<number[]>;
  close(): Promise<void>;
}

/** What the spool's producer side is opened with. */
export interface SpoolOptions {
  readonly durability: Durability;
}
