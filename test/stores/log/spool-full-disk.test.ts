/**
 * A full disk while the owner ingests the spool: the records the store refused (`ERR_STORE_FULL`)
 * stay in their spool files, and once space is back a later pass ingests every one of them. Over
 * the simulated disk with its space budget set just above what is in use.
 */
import { expect, it } from 'vitest';
import { Builder } from '../../../src/core/builder.js';
import { LogStore } from '../../../src/stores/log/log-store.js';
import { openSpool } from '../../../src/stores/log/engine/spool-producer.js';
import { CrashFileSystem } from '../../../src/testing/index.js';

const DIR = '/q';
const OPTIONS = { segmentBytes: 4096, preallocate: false, autoCompact: false } as const;
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

it('recordsAFullDiskRefusedAreIngestedByALaterPassOnceSpaceIsBack', async () => {
  const fs = new CrashFileSystem({ seed: 5 });
  // A store with nothing in it, then four producers' files of a record each.
  const [tx0] = await new Builder(await LogStore.open(DIR, { ...OPTIONS, fs })).open();
  await tx0.close();
  const names = Array.from({ length: 4 }, (_, i) => `run-${i}-${'x'.repeat(200)}`);
  for (const [i, name] of names.entries()) {
    const p = await openSpool(DIR, { durability: 'none', fs, now: () => 1_700_000_000_000 + i });
    await p.pushMany([enc(name)], {}, undefined);
    await p.close();
  }
  // Room for the open's own records, not for a spooled item.
  fs.setDiskBytesMax(fs.usedBytes() + 64);
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void warnings.push(w.message);
  process.on('warning', onWarning);
  try {
    const store = await LogStore.open(DIR, { ...OPTIONS, fs, spoolPollMs: 60_000 });
    const [tx, rx] = await new Builder(store).open();
    await store.ingestSpool();
    expect(rx.stats().ready, 'the full disk took no item in').toBe(0);
    fs.setDiskBytesMax(Number.MAX_SAFE_INTEGER);
    // A pass asked for now may be one that started before the space came back: ask until the
    // files are gone (each call waits for a pass; a few suffice).
    const spooled = (): string[] => fs.readdir(`${DIR}/spool`).filter((n) => n.endsWith('.pqs'));
    for (let pass = 0; pass < 5 && spooled().length > 0; pass++) await store.ingestSpool();
    const got: string[] = [];
    for (
      let item = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null);
      item !== null;
      item = rx.tryReserve() ?? (rx.stats().ready > 0 ? await rx.reserve() : null)
    ) {
      got.push(dec(item.bytes));
      await item.ack();
    }
    expect(got).toEqual(names);
    await tx.close();
  } finally {
    process.off('warning', onWarning);
  }
  expect(fs.readdir(`${DIR}/spool`).filter((n) => n.endsWith('.pqs'))).toEqual([]);
});
