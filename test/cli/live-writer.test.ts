/**
 * `pq stats --read-only` beside a live writer: a store another process has open and keeps writing
 * is read from its files as it is, never as damaged. The built binary in spawned processes, a real
 * writer in another one (which serves its queue: without --read-only, stats asks it instead).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { distUrl, root, runModule, type Lines } from '../support/child-process.js';

const bin = join(root, 'dist', 'cli', 'pq.js');

let work: string;
let dir: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-cli-live-'));
  dir = join(work, 'queue');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/**
 * A writer that never stops: 64 producers pushing 128 B items under `group`, so the active
 * segment is preallocated and its zeros are overwritten batch by batch, and a consumer acking
 * every item under `group` (`process()`, 64 at a time, so that acks share fsyncs and keep up). A
 * capacity keeps the backlog, and the disk it takes, small. It prints `ready` once 2000 pushes
 * resolved, then nothing.
 */
const WRITER = `
import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
const store = await LogStore.open(process.argv[2]);
const [tx, rx] = await new Builder(store).durability('group').ackDurability('group').capacity(4096).open();
const payload = 'x'.repeat(128);
let pushed = 0;
for (let p = 0; p < 64; p++) {
  (async () => {
    for (;;) {
      await tx.push(payload);
      if (++pushed === 2000) console.log('ready');
    }
  })();
}
rx.process(async () => {}, { concurrency: 64 });
`;

/** Runs of `pq stats` beside the writer: a fixed count, each one a fresh read of the store. */
const RUNS = 30;
/** Runs of `pq verify`, which reads every record of the store each time. */
const VERIFY_RUNS = 10;

describe('pq stats beside a live writer', () => {
  it('statsBesideALiveWriterReportsNoTornBytesAndNoCorruption', async () => {
    const writer: Lines = runModule(work, 'writer.mjs', WRITER, [dir]);
    try {
      await writer.until((l) => l.includes('ready'));
      let lastNext = 0;
      for (let run = 1; run <= RUNS; run++) {
        const r = pq(['stats', dir, '--read-only', '--json']);
        const what = `run ${run} of ${RUNS}: exit ${r.code}\n${r.stdout}${r.stderr}`;
        expect(r.stderr, what).toBe('');
        expect(r.code, what).toBe(0);
        const s = JSON.parse(r.stdout) as {
          tornTailBytes: number;
          zeroTailBytes: number;
          liveWriter: { pid: number | null } | null;
          lastShutdownClean: boolean | null;
          nextSeq: number;
        };
        expect(s.tornTailBytes, what).toBe(0);
        expect(s.zeroTailBytes, what).toBe(0);
        expect(s.liveWriter, what).toEqual({ pid: writer.child.pid });
        expect(s.lastShutdownClean, what).toBeNull();
        expect(s.nextSeq, what).toBeGreaterThanOrEqual(lastNext);
        lastNext = s.nextSeq;
      }
      // The text says so too, and calls no byte torn.
      const text = pq(['stats', dir, '--read-only']);
      expect(text.code, text.stderr).toBe(0);
      expect(text.stdout).toMatch(new RegExp(`last close\\s+none yet: process ${writer.child.pid} has the store open`));
      expect(text.stdout).not.toMatch(/past the valid end|not clean/);
      // Without --read-only, the writer itself is asked.
      expect(JSON.parse(pq(['stats', dir, '--json']).stdout)).toMatchObject({ view: 'live', pid: writer.child.pid, consuming: true });
      // Every run was made while the writer was alive and writing.
      expect(writer.child.exitCode, writer.stderr).toBeNull();
      expect(writer.child.signalCode).toBeNull();
    } finally {
      await writer.kill();
    }
    // Killed, the store has no live writer any more: its tail is a crash's, judged by the tail table.
    const r = pq(['stats', dir, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ liveWriter: null, lastShutdownClean: false });
  }, 120_000);

  it('verifyBesideALiveWriterFindsNoDamageAndSaysTheStoreIsOpen', async () => {
    const writer: Lines = runModule(work, 'writer.mjs', WRITER, [dir]);
    try {
      await writer.until((l) => l.includes('ready'));
      for (let run = 1; run <= VERIFY_RUNS; run++) {
        const r = pq(['verify', dir, '--json']);
        const what = `run ${run} of ${VERIFY_RUNS}: exit ${r.code}\n${r.stdout}${r.stderr}`;
        expect(r.stderr, what).toBe('');
        const v = JSON.parse(r.stdout) as { problems: unknown[]; notes: string[] };
        expect(v.problems, what).toEqual([]);
        expect(r.code, what).toBe(0);
        expect(v.notes, what).toContain(
          `LOCK: process ${writer.child.pid} has the store open and is writing it: the active segment was read up to its last whole record (what follows is being written, not damage)`,
        );
        expect(v.notes.join('\n'), what).not.toMatch(/torn tail|zero bytes/);
      }
      expect(writer.child.exitCode, writer.stderr).toBeNull();
    } finally {
      await writer.kill();
    }
  }, 120_000);
});
