/**
 * Real processes: a child opens a LogStore, declares a schedule firing every 20 ms with
 * `catchUp: 'all'` (the same declaration at every start), and is SIGKILLed after a seeded number of
 * fires, several times over; each new child catches up on the slots that passed while none ran.
 * Afterwards every slot from the first to the last exists exactly once. Kill points are counts of
 * fires the child reported (each item stored, from the `push` diagnostics channel), never
 * wall-clock delays. Needs `dist/` (`npm run build`, which `npm test` runs first).
 */
import { afterAll, describe, expect, test } from 'vitest';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { Prng, formatSeed, seedFromEnv, withReproduction } from '../../../src/testing/index.js';
import { distUrl, lineWriterSource, runModule } from '../../support/child-process.js';
import { cleanupDirs, freshDir } from './helpers.js';
import { dirname } from 'node:path';

afterAll(cleanupDirs);

const EVERY_MS = 20;

// Lines go out with `out`, in the pipe when it returns: a fire reported before the kill is never lost.
const CHILD = `
import { channel } from 'node:diagnostics_channel';
import { Builder, LogStore, channels } from ${JSON.stringify(distUrl('index.js'))};
${lineWriterSource}
channel(channels.push).subscribe((m) => out('fired ' + m.seq));
const [tx] = await new Builder(await LogStore.open(process.argv[2])).open();
await tx.schedule('tick', { everyMs: ${EVERY_MS} }, 'tick', { catchUp: 'all', maxCatchUp: 100000 });
out('ready');
// A ref'd timer: the schedule's own timer does not keep a process alive.
setInterval(() => {}, 1 << 30);
`;

describe('a schedule across SIGKILLs', () => {
  test('everySlotFromTheFirstToTheLastExistsExactlyOnce', async () => {
    const seed = seedFromEnv(0x5c1);
    await withReproduction(
      () => `SEED=${formatSeed(seed)} npx vitest run test/stores/log/schedules-kill.test.ts`,
      async () => {
        const rng = new Prng(seed);
        const dir = freshDir();
        let fires = 0;
        for (let life = 0; life < 6; life++) {
          const child = runModule(dirname(dir), `child-${life}.mjs`, CHILD, [dir]);
          const kill = rng.intBetween(1, 8);
          await child.until((lines) => lines.filter((l) => l.startsWith('fired ')).length >= kill);
          await child.kill();
          fires += child.lines.filter((l) => l.startsWith('fired ')).length;
        }
        const store = await LogStore.open(dir);
        await store.open();
        const slots = store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1_000_000 }).map((i) => i.fired!.slot);
        await store.close();
        // Each child reported only what it stored before it died.
        expect(slots.length).toBeGreaterThanOrEqual(fires);
        expect(new Set(slots).size, `a slot fired twice: ${slots.join(',')}`).toBe(slots.length);
        const sorted = [...slots].sort((a, b) => a - b);
        expect(slots, 'the slots are stored in order').toEqual(sorted);
        for (let i = 1; i < sorted.length; i++)
          expect(sorted[i]! - sorted[i - 1]!, `a slot is missing after ${sorted[i - 1]}`).toBe(EVERY_MS);
      },
    );
  });
});
