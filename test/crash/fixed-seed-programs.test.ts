/** Crash programs that once failed, kept as fixed seeds (each found by `npm run fuzz -- engine-crash`). */
import { expect, test } from 'vitest';
import { Prng } from '../../src/testing/index.js';
import { randomProgram, runProgram } from '../../harness/crash-model.js';

/** Builds the program exactly as fuzz/fuzzers.ts `engineExec` does for one seed. */
function programOf(seed: number) {
  const rnd = new Prng(seed);
  return randomProgram(rnd, 20 + rnd.int(60));
}

test.each([
  // An ack's cursor record was written, the fdatasync covering it failed (EIO), a second
  // fdatasync of the cursor succeeded and resolved the ack; after a power loss the item came back.
  [0xd2f001d2, 'an ack resolved by a sync that followed a failed one'],
])('fuzz seed %s: %s', async (seed) => {
  const stats = await runProgram(programOf(seed));
  expect(stats.recoveries).toBeGreaterThan(0);
});
