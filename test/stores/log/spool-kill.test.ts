/**
 * Producers SIGKILLed in the middle of spooling, in real processes: four producer processes spool
 * with 8 concurrent pushes each under `group` while no process has the queue open, each printing
 * every push that resolved; each is killed once it has printed a number of them (seeded). An owner
 * then opens the queue and ingests the spool: every push that resolved is delivered exactly once,
 * each producer's pushes in its order, and the spool is empty afterwards (the dead producers'
 * files finished, their torn tails dropped). Needs `dist/` (`npm test` builds it first).
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { distUrl, lineWriterSource, runModule, type Lines } from '../../support/child-process.js';
import { cleanupDirs, dec, freshDir } from './helpers.js';
import { Prng, formatSeed } from '../../../src/testing/index.js';

afterAll(cleanupDirs);

const SEED = Number(process.env.PQ_SEED ?? 0x5b001);
const PRODUCERS = 4;

/** A producer: spools `p<n>-<i>` from 8 loops, printing `ok <payload>` once each push resolved. */
const PRODUCER = `
const { openSpool } = await import(${JSON.stringify(distUrl('stores/log/engine/spool-producer.js'))});
const { nodeFileSystem } = await import(${JSON.stringify(distUrl('fs/node-fs.js'))});
${lineWriterSource}
const [dir, name] = process.argv.slice(2);
const spool = await openSpool(dir, { durability: 'group', fs: nodeFileSystem });
out('ready');
let n = 0;
await Promise.all(Array.from({ length: 8 }, async () => {
  for (;;) {
    const text = name + '-' + String(n++).padStart(6, '0');
    await spool.pushMany([new TextEncoder().encode(text)], {}, undefined);
    out('ok ' + text);
  }
}));
`;

describe('producers SIGKILLed while they spool', () => {
  it('everyResolvedPushOfAKilledProducerIsDeliveredOnceInItsOrder', async () => {
    const rnd = new Prng(SEED);
    const where = `reproduce: PQ_SEED=${formatSeed(SEED)} npx vitest run test/stores/log/spool-kill.test.ts`;
    const dir = freshDir();
    const work = freshDir();
    const { mkdirSync } = await import('node:fs');
    mkdirSync(work, { recursive: true });
    const children: Lines[] = [];
    for (let p = 0; p < PRODUCERS; p++) children.push(runModule(work, `producer-${p}.mjs`, PRODUCER, [dir, `p${p}`]));
    await Promise.all(
      children.map(async (child) => {
        const stopAt = 50 + rnd.int(400);
        await child.until((lines) => lines.filter((l) => l.startsWith('ok ')).length >= stopAt);
        await child.kill();
      }),
    );
    const resolved = children.map((c) => c.lines.filter((l) => l.startsWith('ok ')).map((l) => l.slice(3)));
    const store = await LogStore.open(dir);
    const [tx, rx] = await new Builder(store).open();
    await store.ingestSpool();
    const got: string[] = [];
    for (let item = rx.tryReserve(); item !== null; item = rx.tryReserve()) {
      got.push(dec(item.bytes));
      await item.ack();
    }
    expect(new Set(got).size, `${where}: delivered twice`).toBe(got.length);
    const gotSet = new Set(got);
    for (const list of resolved)
      for (const text of list) expect(gotSet.has(text), `${where}: ${text} resolved but was not delivered`).toBe(true);
    for (let p = 0; p < PRODUCERS; p++) {
      const mine = got.filter((t) => t.startsWith(`p${p}-`));
      expect(mine, `${where}: producer ${p}'s order`).toEqual([...mine].sort());
    }
    expect(store.inspect().spool!.problems).toEqual([]);
    expect(
      readdirSync(join(dir, 'spool')).filter((n) => n.endsWith('.pqs')),
      `${where}: the dead producers' files are finished`,
    ).toEqual([]);
    console.log(
      `[spool kill] ${resolved.map((r) => r.length).join('+')} resolved, ${got.length} delivered (the rest were written but had not resolved)`,
    );
    await tx.close();
  });
});
