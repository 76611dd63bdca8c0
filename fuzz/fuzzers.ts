/**
 * The fuzzers of the registry (fuzz/run.ts). Each `exec` gets its own seeded PRNG and throws
 * {@link FuzzFailure} when its property breaks.
 * - segment-decoder / cursor-decoder: valid store files (from a real run on the crash disk,
 *   captured after a process crash so that segments have unsealed tails and the cursor holds ACK
 *   records), mutated (bit flips, random bytes, huge length fields, truncation, random tails,
 *   wholly random files), written to a fresh crash disk, then open + read everything + append +
 *   close + verifyStore. Property: only QueueError/OpenError with a code ever escapes; no exec
 *   takes more than `hangMs`; no exec grows `arrayBuffers` by more than 64 MiB (a length field
 *   must be bounded before it sizes an allocation).
 * - engine-crash: the model-based crash program of harness/crash-model.ts, one seed per exec.
 * - canary: the same program on a disk whose fsyncs lie; the checker MUST find a violation.
 */
import { LogStore } from '../src/log-store.js';
import { verifyStore } from '../src/log/verify.js';
import { QueueError } from '../src/errors.js';
import { CrashFileSystem, Prng } from '../src/testing/index.js';
import { PropertyViolation, randomProgram, readAll, runProgram } from '../harness/crash-model.js';

export class FuzzFailure extends Error {
  override name = 'FuzzFailure';
}

export interface Fuzzer {
  readonly name: string;
  readonly description: string;
  /** The canary: the runner passes only if an exec failed. */
  readonly mustFail?: boolean;
  exec(prng: Prng): Promise<void>;
}

const DIR = '/s';
const MiB = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Decoders

interface Corpus {
  files: Map<string, Uint8Array>;
}

let corpora: Corpus[] | null = null;

/** A few valid stores, each captured after a process crash (unsealed tails, ACK records in the cursor). */
async function buildCorpora(): Promise<Corpus[]> {
  const out: Corpus[] = [];
  for (let variant = 0; variant < 4; variant++) {
    const rnd = new Prng(0xc0ffee + variant);
    let fs = new CrashFileSystem({ seed: variant + 1 });
    const store = await LogStore.open(DIR, { fs, segmentBytes: 256 + variant * 128, cursorCheckpointBytes: variant === 3 ? 64 : 1 << 20, preallocate: variant === 2, autoCompact: false });
    await store.open();
    let seq = 1;
    const acked = new Set<number>();
    for (let i = 0; i < 12 + variant * 4; i++) {
      const n = 1 + rnd.int(3);
      const items = Array.from({ length: n }, () => ({ seq: seq++, bytes: rnd.bytes(rnd.int(60)) }));
      await store.append(items, rnd.bool(0.7));
      if (rnd.bool(0.5)) {
        const s = 1 + rnd.int(seq - 1);
        if (!acked.has(s)) {
          acked.add(s);
          await store.ack([s], rnd.bool());
        }
      }
    }
    if (variant === 1) await store.compact();
    fs = fs.processCrash();
    const files = new Map<string, Uint8Array>();
    for (const [path, bytes] of fs.snapshot({ pristine: true })) if (path.startsWith(`${DIR}/`)) files.set(path, bytes.slice());
    out.push({ files });
  }
  return out;
}

function mutate(rnd: Prng, bytes: Uint8Array): Uint8Array {
  let b: Uint8Array = bytes.slice();
  const rounds = 1 + rnd.int(4);
  for (let r = 0; r < rounds; r++) {
    const kind = rnd.int(9);
    if (b.length === 0 && kind < 6) continue;
    if (kind === 0) b[rnd.int(b.length)]! ^= 1 << rnd.int(8); // bit flip
    else if (kind === 1) b[rnd.int(b.length)] = rnd.int(256); // random byte
    else if (kind === 2 && b.length >= 4) {
      // A huge or odd 32-bit field (frame lengths sit 4 bytes into each 20-byte frame header).
      const at = rnd.int(b.length - 3);
      const v = rnd.pick([0xffffffff, 0x7fffffff, 0x10000000, 0x0fffffff, 0x01000000, 0, 1, rnd.next() >>> 0]);
      new DataView(b.buffer, b.byteOffset, b.byteLength).setUint32(at, v, rnd.bool());
    } else if (kind === 3 && b.length >= 2) {
      // A huge 16-bit field (meta lengths, header sizes, versions).
      const at = rnd.int(b.length - 1);
      new DataView(b.buffer, b.byteOffset, b.byteLength).setUint16(at, rnd.pick([0xffff, 0x8000, 0, 2, rnd.int(65536)]), rnd.bool());
    } else if (kind === 4) {
      const at = rnd.int(b.length);
      b.set(rnd.bytes(Math.min(b.length - at, 1 + rnd.int(16))), at); // random run
    } else if (kind === 5) {
      const at = rnd.int(b.length);
      b.fill(0, at, Math.min(b.length, at + 1 + rnd.int(64))); // zero run
    } else if (kind === 6) b = b.slice(0, rnd.int(b.length + 1)); // truncate
    else if (kind === 7) {
      const tail = rnd.bool() ? rnd.bytes(rnd.int(128)) : new Uint8Array(rnd.int(128));
      const grown = new Uint8Array(b.length + tail.length);
      grown.set(b);
      grown.set(tail, b.length);
      b = grown;
    } else b = rnd.bytes(rnd.int(512)); // wholly random
  }
  return b;
}

function typed(e: unknown): boolean {
  return e instanceof QueueError && typeof e.code === 'string' && e.code.startsWith('ERR_');
}

async function decoderExec(rnd: Prng, target: 'segment' | 'cursor', hangMs: number): Promise<void> {
  corpora ??= await buildCorpora();
  const corpus = rnd.pick(corpora);
  const fs = new CrashFileSystem({ seed: rnd.next() });
  fs.mkdirp(DIR, 0o700);
  const paths = [...corpus.files.keys()];
  const targets = paths.filter((p) => (target === 'segment' ? p.endsWith('.log') : p.endsWith('.pqc')));
  const victims = new Set<string>();
  if (targets.length > 0) {
    victims.add(rnd.pick(targets));
    if (rnd.bool(0.2)) victims.add(rnd.pick(targets));
  }
  const described: string[] = [];
  for (const path of paths) {
    const bytes = victims.has(path) ? mutate(rnd, corpus.files.get(path)!) : corpus.files.get(path)!;
    if (victims.has(path)) described.push(`${path}(${bytes.length}B)`);
    const fd = fs.open(path, 'create');
    if (bytes.length > 0) fs.write(fd, bytes, 0, bytes.length, 0);
    fs.close(fd);
  }
  fs.syncAll();
  const heapBefore = process.memoryUsage().arrayBuffers;
  const started = performance.now();
  const step = (what: string, e: unknown): void => {
    if (!typed(e)) throw new FuzzFailure(`${what} threw an untyped exception on mutated ${described.join(', ')}: ${(e as Error)?.stack ?? String(e)}`);
  };
  let store: LogStore | null = null;
  try {
    store = await LogStore.open(DIR, { fs, readAheadBytes: 64 + rnd.int(512) });
  } catch (e) {
    step('LogStore.open', e);
  }
  if (store !== null) {
    try {
      const r = await store.open();
      const got = readAll(store);
      if (got.length > r.count) throw new FuzzFailure(`read returned ${got.length} items but count is ${r.count}`);
      await store.append([{ seq: r.nextSeq, bytes: new Uint8Array([1, 2, 3]) }], true);
      await store.compact();
    } catch (e) {
      if (e instanceof FuzzFailure) throw e;
      step('open/read/append/compact', e);
    }
    try {
      await store.close();
    } catch (e) {
      step('close', e);
    }
  }
  try {
    verifyStore(DIR, { fs });
  } catch (e) {
    step('verifyStore', e);
  }
  const elapsedMs = performance.now() - started;
  if (elapsedMs > hangMs) throw new FuzzFailure(`one exec took ${elapsedMs.toFixed(0)} ms (> ${hangMs} ms): a hang on ${described.join(', ')}`);
  const grown = process.memoryUsage().arrayBuffers - heapBefore;
  if (grown > 64 * MiB) throw new FuzzFailure(`arrayBuffers grew by ${(grown / MiB).toFixed(0)} MiB in one exec: an allocation sized by a length field (${described.join(', ')})`);
}

// ---------------------------------------------------------------------------------------------
// Whole engine

/** A disk whose file syncs resolve without syncing: what the canary runs on. */
function lying(fs: CrashFileSystem): CrashFileSystem {
  return new Proxy(fs, {
    get(target, key) {
      if (key === 'fdatasync' || key === 'fsync') return () => Promise.resolve();
      if (key === 'crash') return (...a: unknown[]) => lying((target.crash as (...x: unknown[]) => CrashFileSystem)(...a));
      if (key === 'processCrash') return () => lying(target.processCrash());
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

async function engineExec(rnd: Prng, lie: boolean): Promise<void> {
  const program = randomProgram(rnd, 20 + rnd.int(60));
  try {
    await runProgram(program, lie ? { wrapDisk: lying } : {});
  } catch (e) {
    if (e instanceof PropertyViolation) throw new FuzzFailure(e.message);
    throw e;
  }
}

export const FUZZERS: readonly Fuzzer[] = [
  {
    name: 'segment-decoder',
    description: 'mutated segment files: open/read/append/compact/verify throw only typed errors, never hang or over-allocate',
    exec: (rnd) => decoderExec(rnd, 'segment', 2000),
  },
  {
    name: 'cursor-decoder',
    description: 'mutated cursor files: open/read/append/compact/verify throw only typed errors, never hang or over-allocate',
    exec: (rnd) => decoderExec(rnd, 'cursor', 2000),
  },
  {
    name: 'engine-crash',
    description: 'model-based crash programs (harness/crash-model.ts) over the real queue on the crash disk',
    exec: (rnd) => engineExec(rnd, false),
  },
  {
    name: 'canary',
    description: 'engine-crash on a disk whose fsyncs lie: the checker MUST report a violation',
    mustFail: true,
    exec: (rnd) => engineExec(rnd, true),
  },
];
