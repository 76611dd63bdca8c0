/**
 * Model-based crash properties: fast-check generates programs of push / pushMany /
 * burst / reserve / ack / nack / drop / compact / reopen / crash / EIO / ENOSPC / EMFILE, run over
 * the real queue (Builder + LogStore on the simulated crash disk, tiny segments) under every
 * policy, with acks following it or lazy, then a drain with faults and crashes off. The workload, model and checker live in
 * harness/crash-model.ts (fuzz/engine-crash reuses them); the property list is in its header.
 *
 * Seeded: `PQ_SEED` (default below) and `PQ_PATH` (a fast-check shrink path) replay a run; a
 * failure's message begins with the line to paste:
 *   reproduce: PQ_SEED=123 PQ_PATH="4:1:0" npx vitest run test/crash/model.test.ts  [crash-fs: seed=... crash=...]
 * `PQ_RUNS` raises the number of programs for a longer local run.
 */
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { type Op, type Policy, POLICIES, type Program, PropertyViolation, runBitFlip, runProgram } from '../../harness/crash-model.js';

const SEED = Number(process.env.PQ_SEED ?? 0x1ce5eed);
const PATH = process.env.PQ_PATH;
const RUNS = Number(process.env.PQ_RUNS ?? 400);

const policy = fc.constantFrom<Policy>(...POLICIES);
const size = fc.oneof({ arbitrary: fc.nat(40), weight: 4 }, { arbitrary: fc.nat(400), weight: 1 });
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 20, arbitrary: fc.record({ kind: fc.constant('push' as const), size }) },
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('pushMany' as const), sizes: fc.array(size, { minLength: 1, maxLength: 6 }) }) },
  {
    weight: 7,
    arbitrary: fc.record({ kind: fc.constant('burst' as const), pushes: fc.integer({ min: 1, max: 8 }), acks: fc.nat(3), size }),
  },
  { weight: 16, arbitrary: fc.record({ kind: fc.constant('reserve' as const), count: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 12, arbitrary: fc.record({ kind: fc.constant('ack' as const), pick: fc.nat(1000) }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('nack' as const), pick: fc.nat(1000) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('drop' as const), pick: fc.nat(1000) }) },
  { weight: 4, arbitrary: fc.constant({ kind: 'compact' as const }) },
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('reopen' as const), policy }) },
  {
    weight: 12,
    arbitrary: fc.record({ kind: fc.constant('crash' as const), process: fc.boolean(), inFlight: fc.nat(5), ticks: fc.nat(3), policy }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('eio' as const), nth: fc.integer({ min: 1, max: 4 }) }) },
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('enospc' as const), slackBytes: fc.nat(600), pushes: fc.integer({ min: 1, max: 4 }), size }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('emfile' as const), nth: fc.integer({ min: 1, max: 3 }) }) },
);

const program: fc.Arbitrary<Program> = fc.record({
  diskSeed: fc.nat(),
  policy,
  segmentBytes: fc.integer({ min: 256, max: 1280 }),
  cursorCheckpointBytes: fc.integer({ min: 32, max: 544 }),
  tailCacheBytes: fc.oneof(fc.constant(0), fc.nat(4096)),
  preallocate: fc.boolean(),
  autoCompact: fc.boolean(),
  // Syncs on the calling thread in about a quarter of the programs.
  blockingSync: fc.oneof({ arbitrary: fc.constant(false), weight: 3 }, { arbitrary: fc.constant(true), weight: 1 }),
  // Lazy acks in about a third of the programs, synced every 1 to 4 acks.
  lazyAcks: fc.oneof({ arbitrary: fc.constant(0), weight: 2 }, { arbitrary: fc.integer({ min: 1, max: 4 }), weight: 1 }),
  ops: fc.array(op, { minLength: 5, maxLength: 80, size: 'max' }),
});

const totals = { programs: 0, ops: 0, crashes: 0, recoveries: 0, faultsFired: 0, delivered: 0, flips: new Map<string, number>() };

/** Runs a property; on failure throws an error whose message begins with the reproduction line. */
async function check<T>(name: string, arb: fc.Arbitrary<T>, body: (value: T) => Promise<void>, numRuns: number): Promise<void> {
  let lastRepro = '';
  const details = await fc.check(
    fc.asyncProperty(arb, async (value) => {
      try {
        await body(value);
      } catch (e) {
        if (e instanceof PropertyViolation) lastRepro = e.reproLine;
        throw e;
      }
    }),
    { seed: SEED, numRuns, ...(PATH === undefined ? {} : { path: PATH }), endOnFailure: false },
  );
  if (details.failed) {
    const line = `reproduce: PQ_SEED=${details.seed} PQ_PATH="${details.counterexamplePath}" npx vitest run test/crash/model.test.ts -t "${name}"  [crash-fs: ${lastRepro}]`;
    const error = details.errorInstance as Error | undefined;
    throw new Error(
      `${line}\n${error?.message ?? String(details.errorInstance)}\ncounterexample: ${JSON.stringify(details.counterexample)}`,
    );
  }
}

describe('crash properties (model-based, fast-check)', () => {
  afterAll(() => {
    console.log(
      `[crash model] seed=${SEED}: ${totals.programs} programs, ${totals.ops} ops, ${totals.crashes} crashes, ${totals.recoveries} recoveries checked, ${totals.faultsFired} injected faults fired, ${totals.delivered} deliveries; bit flips: ${[...totals.flips].map(([k, v]) => `${k}=${v}`).join(' ')}`,
    );
  });

  it('programs with crashes and faults keep every promise, then drain completely', async () => {
    await check(
      'programs with crashes',
      program,
      async (p) => {
        const stats = await runProgram(p);
        totals.programs++;
        totals.ops += stats.ops;
        totals.crashes += stats.crashes;
        totals.recoveries += stats.recoveries;
        totals.faultsFired += stats.faultsFired;
        totals.delivered += stats.delivered;
      },
      RUNS,
    );
    expect(totals.crashes).toBeGreaterThan(0);
  });

  it('a bit flip in synced data is ERR_CORRUPT on open or on read, never delivered', async () => {
    const flipProgram = program.map((p) => ({ ...p, ops: p.ops.filter((o) => o.kind !== 'eio' && o.kind !== 'emfile').slice(0, 25) }));
    await check(
      'bit flip',
      fc.tuple(flipProgram, fc.nat(), fc.nat(7)),
      async ([p, pick, bit]) => {
        const r = await runBitFlip(p, pick, bit);
        totals.flips.set(r.outcome, (totals.flips.get(r.outcome) ?? 0) + 1);
      },
      Math.ceil(RUNS / 2),
    );
    expect((totals.flips.get('open-corrupt') ?? 0) + (totals.flips.get('read-corrupt') ?? 0)).toBeGreaterThan(0);
  });
});
