/**
 * Model-based crash properties of delivery counts and the dead-letter queue: seeded programs of
 * pushes, reserves, acks, nacks (at once and with a delay), dropped reservations, process() with
 * failing handlers and retries, item.deadLetter(), maxDeliveries, redrives, purges, reopens and
 * crashes (power loss or a process crash, also inside process()), over the real queue on the
 * simulated crash disk, under sync and group durability with sync, group or lazy acks. The
 * workload, model and checker are harness/dead-letter-model.ts; its header lists the properties.
 *
 * Seeded: program i uses seed `PQ_SEED + i` (PQ_SEED defaults below); `PQ_DLQ_RUNS` raises the
 * number of programs for a longer local run. A failure's message begins with the line to paste:
 *   reproduce: PQ_SEED=0x… PQ_DLQ_RUNS=1 npx vitest run test/crash/dead-letter-model.test.ts  [crash-fs: seed=… crash=…]
 * `PQ_DLQ_DEBUG=1` prints each operation, the store calls and each recovered state.
 * Time is the fake clock's (retry and nack delays): a run never depends on timing.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type DlqStats, randomDlqProgram, runDlqProgram } from '../../harness/dead-letter-model.js';
import { PropertyViolation } from '../../harness/crash-model.js';
import { Prng, formatSeed, seedFromEnv, withReproduction } from '../../src/testing/index.js';

const SEED = seedFromEnv(0xd1e77e57, 'PQ_SEED');
const RUNS = Number(process.env.PQ_DLQ_RUNS ?? 60);

const totals: DlqStats = {
  crashes: 0,
  recoveries: 0,
  delivered: 0,
  moved: 0,
  redriven: 0,
  purged: 0,
  lazyRedelivered: 0,
  countsLowered: 0,
  countsRaised: 0,
};

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('crash properties of delivery counts and dead letters (model-based, seeded)', () => {
  afterAll(() => {
    console.log(
      `[dead-letter model] seed=${formatSeed(SEED)}: ${RUNS} programs, ${Object.entries(totals)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ')}`,
    );
  });

  it('programs with crashes keep every promise of delivery counts, dead letters, redrives and purges, then drain completely', async () => {
    for (let i = 0; i < RUNS; i++) {
      const seed = (SEED + i) >>> 0;
      const rnd = new Prng(seed);
      const program = randomDlqProgram(rnd, 20 + rnd.int(50));
      let crashFs = '';
      const stats = await withReproduction(
        () => `PQ_SEED=${formatSeed(seed)} PQ_DLQ_RUNS=1 npx vitest run test/crash/dead-letter-model.test.ts  [crash-fs: ${crashFs}]`,
        async () => {
          try {
            return await runDlqProgram(program, async (ms) => void (await vi.advanceTimersByTimeAsync(ms)));
          } catch (e) {
            if (e instanceof PropertyViolation) crashFs = e.reproLine;
            throw e;
          }
        },
      );
      for (const k of Object.keys(totals) as (keyof DlqStats)[]) totals[k] += stats[k];
    }
    // The programs reach what they are for: crashes, moves, redrives, purges.
    expect(totals.crashes).toBeGreaterThan(0);
    expect(totals.moved).toBeGreaterThan(0);
    expect(totals.redriven).toBeGreaterThan(0);
    expect(totals.purged).toBeGreaterThan(0);
  }, 120_000);
});
