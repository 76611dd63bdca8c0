/** An in-memory ordered KV for the example store of the docs (examples/kv-store.ts). */
import type { KV } from '../../examples/kv-store.js';

export class MapKV implements KV {
  data = new Map<string, string>();
  async get(key: string) {
    return this.data.get(key);
  }
  async range(gt: string, lt: string, limit: number): Promise<[string, string][]> {
    const keys = [...this.data.keys()].filter((k) => k > gt && k < lt).sort();
    return keys.slice(0, limit).map((k) => [k, this.data.get(k)!]);
  }
  async batch(ops: { put?: [string, string]; del?: string }[]) {
    for (const op of ops) {
      if (op.put) this.data.set(op.put[0], op.put[1]);
      if (op.del) this.data.delete(op.del);
    }
  }
  async close() {}
}
