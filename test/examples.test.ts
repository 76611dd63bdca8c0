/** The README's code runs as written, and its "Implement Store yourself" example passes the conformance suite. */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect, it, test } from 'vitest';
import { runStoreConformance } from '../src/conformance.js';
import { type KV, KVStore } from '../examples/kv-store.js';

const root = resolve(import.meta.dirname, '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** Every fenced block of `lang` in the README, in order. */
function blocks(lang: string): string[] {
  return [...readme.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]!);
}

it('theReadmeQuickExampleRunsAsWritten', () => {
  const block = blocks('ts').find((b) => b.includes('new Builder(new MemStore())'));
  expect(block, 'README has the MemStore example').toBeDefined();
  const dir = mkdtempSync(join(tmpdir(), 'pq-readme-'));
  try {
    const dist = pathToFileURL(join(root, 'dist', 'index.js')).href;
    // The example has no type annotations, so it runs as JavaScript against the built package.
    const file = join(dir, 'example.mjs');
    writeFileSync(file, block!.replaceAll("from 'persistent-queue'", `from '${dist}'`));
    const out = execFileSync(process.execPath, [file], { encoding: 'utf8' });
    expect(out).toBe('job\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('theReadmeShowsTheKvStoreExampleVerbatim', () => {
  const source = readFileSync(join(root, 'examples', 'kv-store.ts'), 'utf8');
  expect(blocks('ts')).toContain(source);
});

/** An in-memory ordered KV for the example store. */
class MapKV implements KV {
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

runStoreConformance(test, {
  name: 'README KVStore',
  create: () => new KVStore(new MapKV()),
  reopen: (previous) => new KVStore(previous.kv),
});
