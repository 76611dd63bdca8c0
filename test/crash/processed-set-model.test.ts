/**
 * LogProcessedSet on the simulated crash disk: seeded programs of records (several at once, so
 * that they share appends), forgets, clean reopens, process crashes and power losses, checked
 * after every recovery against a model of what was recorded:
 * - every record that resolved and was not forgotten is there (under `'group'` after a power
 *   loss too; under `'none'` after a process crash);
 * - nothing is there that was never recorded;
 * - after a clean close, exactly the records not forgotten are there.
 * A canary runs the power-loss checker over a set that does not sync its records (`'none'`): it
 * must find a lost record, proving the checker can fail. Every failure starts with the line that
 * replays it (`SEED=0x... npx vitest run test/crash/processed-set-model.test.ts`).
 */
import { describe, expect, it } from 'vitest';
import { LogProcessedSet } from '../../src/once/log-processed-set.js';
import { CrashFileSystem, Prng, formatSeed, seedFromEnv, withReproduction } from '../../src/testing/index.js';

const DIR = '/set';
const STEPS = 60;

type Durability = 'group' | 'none';
type CrashKind = 'power' | 'process';

interface Outcome {
  /** The first violation found, or undefined. */
  violation: string | undefined;
  crashes: number;
  maxEntries: number;
}

async function openSet(fs: CrashFileSystem, durability: Durability, rnd: Prng): Promise<LogProcessedSet> {
  return LogProcessedSet.open(DIR, { fs, durability, segmentBytes: 256, preallocate: rnd.bool() });
}

/** One seeded program; returns the first violation instead of throwing, so the canary can count them. */
async function runProgram(seed: number, durability: Durability, crashes: readonly CrashKind[]): Promise<Outcome> {
  const rnd = new Prng(seed);
  let fs = new CrashFileSystem({ seed });
  let set = await openSet(fs, durability, rnd);
  /** Recorded (resolved) and not forgotten: must survive. */
  const held = new Set<number>();
  /** Every seq ever passed to record(): nothing else may appear. */
  const issued = new Set<number>();
  let next = 1;
  const outcome: Outcome = { violation: undefined, crashes: 0, maxEntries: 0 };

  const check = (when: string, exact: boolean): string | undefined => {
    for (const seq of held) if (!set.has(seq)) return `${when}: record ${seq} resolved and was never forgotten, but is gone`;
    let found = 0;
    for (const seq of issued) if (set.has(seq)) found++;
    if (found !== set.size) return `${when}: the set holds ${set.size - found} entries that were never recorded`;
    if (exact && set.size !== held.size) return `${when}: after a clean close the set holds ${set.size} entries, expected ${held.size}`;
    return undefined;
  };

  for (let step = 0; step < STEPS && outcome.violation === undefined; step++) {
    const op = rnd.int(10);
    if (op < 5) {
      // A burst of records at once: the first goes alone, the rest share the next append.
      const seqs = Array.from({ length: rnd.intBetween(1, 6) }, () => (rnd.bool(0.1) && held.size > 0 ? [...held][0]! : next++));
      for (const s of seqs) issued.add(s);
      await Promise.all(seqs.map((s) => set.record(s)));
      for (const s of seqs) held.add(s);
    } else if (op < 7) {
      const some = [...held].filter(() => rnd.bool(0.6));
      if (rnd.bool(0.2)) some.push(next + 1000); // a seq never recorded is ignored
      for (const s of some) held.delete(s);
      await set.forget(some);
    } else if (op < 8) {
      await set.close();
      set = await openSet(fs, durability, rnd);
      outcome.violation = check(`step ${step}, clean reopen`, true);
    } else {
      // Records still being written when the crash comes: issued, not held.
      const inFlight = Array.from({ length: rnd.int(3) }, () => next++);
      for (const s of inFlight) {
        issued.add(s);
        set.record(s).catch(() => {});
      }
      const kind = rnd.pick(crashes);
      fs = kind === 'power' ? fs.crash() : fs.processCrash();
      outcome.crashes++;
      set = await openSet(fs, durability, rnd);
      outcome.violation = check(`step ${step}, after a ${kind} crash (${fs.reproLine()})`, false);
      // What survived besides (forgotten entries brought back, records that were in flight) is held from now on.
      for (const s of issued) if (set.has(s)) held.add(s);
    }
    outcome.maxEntries = Math.max(outcome.maxEntries, set.size);
  }
  await set.close().catch(() => {});
  return outcome;
}

async function checked(seed: number, durability: Durability, crashes: readonly CrashKind[]): Promise<Outcome> {
  let outcome: Outcome | undefined;
  await withReproduction(
    () =>
      `SEED=${formatSeed(seed)} npx vitest run test/crash/processed-set-model.test.ts (durability ${durability}, crashes ${crashes.join('+')})`,
    async () => {
      outcome = await runProgram(seed, durability, crashes);
      if (outcome.violation !== undefined) throw new Error(outcome.violation);
    },
  );
  return outcome!;
}

const FIRST_SEED = seedFromEnv(0x5e7);
const RUNS = process.env.SEED ? 1 : 25;

describe('LogProcessedSet on the crash disk', () => {
  it('groupDurabilityKeepsEveryResolvedRecordThroughPowerLossesAndProcessCrashes', async () => {
    let crashes = 0;
    for (let i = 0; i < RUNS; i++) crashes += (await checked(FIRST_SEED + i, 'group', ['power', 'process'])).crashes;
    expect(crashes, 'the programs crashed').toBeGreaterThan(RUNS);
  });

  it('noneDurabilityKeepsEveryResolvedRecordThroughProcessCrashes', async () => {
    for (let i = 0; i < RUNS; i++) await checked(FIRST_SEED + 1000 + i, 'none', ['process']);
  });

  it('canaryUnsyncedRecordsAreLostToAPowerLossAndTheCheckerSaysSo', async () => {
    // The same checker, over records that are written but never synced, with power losses only.
    let violations = 0;
    for (let i = 0; i < 25; i++) {
      const outcome = await runProgram(FIRST_SEED + 2000 + i, 'none', ['power']);
      if (outcome.violation !== undefined) violations++;
    }
    expect(violations, 'the checker must catch records a power loss took').toBeGreaterThan(0);
  });
});
