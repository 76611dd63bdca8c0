/**
 * A real full disk: mount a 2 MiB tmpfs, fill it through the queue until a push rejects
 * with ERR_STORE_FULL, check that nothing acknowledged is lost, free space (delete a filler file
 * this test created, and ack + compact), and push again. Needs root (mount); elsewhere the test is
 * reported as SKIPPED with the reason, never as passed.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Builder } from '../../src/core/builder.js';
import { LogStore } from '../../src/stores/log/log-store.js';
import { isQueueError } from '../../src/contract/errors.js';

const base = mkdtempSync(join(tmpdir(), 'pq-tmpfs-'));
const mount = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', base], { encoding: 'utf8' });
const mounted = mount.status === 0;
const reason = mounted
  ? ''
  : `cannot mount a tmpfs here (${(mount.stderr || mount.error?.message || `exit ${mount.status}`).trim()}); run as root to test a real full disk`;
if (!mounted) {
  console.warn(`SKIPPED test/crash/enospc-tmpfs.test.ts: ${reason}`);
  rmSync(base, { recursive: true, force: true });
}

describe('a real full disk (tmpfs)', () => {
  it.skipIf(!mounted)(
    `fills up with ERR_STORE_FULL, loses nothing acknowledged, and works again once space returns${mounted ? '' : ` — SKIPPED: ${reason}`}`,
    async () => {
      try {
        const dir = join(base, 'store');
        // A filler the test can delete to give space back (the store's own files are never touched).
        const filler = join(base, 'filler');
        writeFileSync(filler, new Uint8Array(512 * 1024));
        const store = await LogStore.open(dir, { segmentBytes: 64 * 1024, preallocate: false });
        const [tx, rx] = await new Builder(store).durability('sync').open();
        const payload = (i: number): Uint8Array => new Uint8Array(4096).fill(i & 0xff);
        const stored: number[] = [];
        let full: unknown = null;
        for (let i = 0; i < 10_000 && full === null; i++) {
          try {
            stored.push(await tx.push(payload(i)));
          } catch (e) {
            full = e;
          }
        }
        expect(full === null ? 'no error' : (full as { code?: string }).code).toBe('ERR_STORE_FULL');
        expect(stored.length).toBeGreaterThan(50);
        // The queue still works: what was acknowledged is all there, in order, with its bytes.
        const first = rx.tryReserve()!;
        expect(first.seq).toBe(stored[0]);
        expect(Buffer.from(first.bytes).equals(Buffer.from(payload(0)))).toBe(true);
        await first.nack();
        // Still full: another push fails the same way, and the instance has not failed.
        await expect(tx.push(payload(1))).rejects.toMatchObject({ code: 'ERR_STORE_FULL' });
        // Space returns.
        unlinkSync(filler);
        const again = await tx.push(payload(7));
        expect(again).toBeGreaterThan(stored[stored.length - 1]!);
        stored.push(again);
        // Drain half with acks, compact, push more.
        const ackedCount = Math.ceil(stored.length / 2);
        for (let k = 0; k < ackedCount; k++) {
          const r = rx.tryReserve()!;
          expect(r.seq).toBe(stored[k]);
          await r.ack();
        }
        await store.compact();
        for (let k = 0; k < 20; k++) stored.push(await tx.push(payload(k)));
        await tx.close();
        // Reopen: everything not acked is there, exactly.
        const reopened = await LogStore.open(dir);
        const [, rx2] = await new Builder(reopened).open();
        const seen: number[] = [];
        for (let r = rx2.tryReserve(); r !== null; r = rx2.tryReserve()) seen.push(r.seq);
        expect(seen).toEqual(stored.slice(ackedCount));
        await rx2.close();
        expect(isQueueError(full, 'ERR_STORE_FULL')).toBe(true);
      } finally {
        // A lazy unmount when an fd is still open (a failed assertion above may leave one).
        if (spawnSync('umount', [base]).status !== 0) spawnSync('umount', ['-l', base]);
        try {
          rmSync(base, { recursive: true, force: true });
        } catch {
          // Left for the OS temp cleaner; the assertion above is the interesting failure.
        }
      }
    },
  );
});
