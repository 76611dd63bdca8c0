/** `pq salvage` and `pq verify` on damaged stores, as a user runs them: the built binary, spawned. */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pushStored } from '../support/pq-cli.js';

const root = resolve(import.meta.dirname, '../..');
const bin = join(root, 'dist', 'cli', 'pq.js');

let work: string;
let dir: string;
let saved: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'pq-salvage-'));
  dir = join(work, 'queue');
  saved = join(work, 'saved');
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

function pq(args: string[], nodeArgs: string[] = []) {
  const r = spawnSync(process.execPath, [...nodeArgs, bin, ...args], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Node arguments that make the CLI's stderr claim to be a terminal, as it is when a person runs pq. */
const STDERR_IS_A_TTY = [
  '--import',
  `data:text/javascript,${encodeURIComponent("Object.defineProperty(process.stderr, 'isTTY', { value: true });")}`,
];

/** Names, sizes, modification times and bytes of every file, and every directory's own modification time. */
function fullHash(path: string, h = createHash('sha256')): string {
  h.update(`${statSync(path).mtimeMs}\n`);
  for (const name of readdirSync(path).sort()) {
    const st = statSync(join(path, name));
    h.update(`${name} ${st.size} ${st.mtimeMs}\n`);
    if (st.isDirectory()) fullHash(join(path, name), h);
    else h.update(readFileSync(join(path, name)));
  }
  return h.copy().digest('hex');
}

/** alpha..echo pushed, alpha popped (acked), one byte of `charlie` (seq 3) flipped. */
function damagedStore(): void {
  pushStored(dir, ['--create', 'alpha', 'bravo', 'charlie', 'delta', 'echo']);
  pq(['pop', dir]);
  const seg = join(dir, readdirSync(dir).find((n) => n.startsWith('seg-'))!);
  const bytes = readFileSync(seg);
  bytes[bytes.indexOf(Buffer.from('charlie')) + 2]! ^= 0x01;
  writeFileSync(seg, bytes);
}

describe('pq salvage', () => {
  it('copiesTheIntactUnackedItemsAroundAFlippedByteAndLeavesTheSourceAsItWas', () => {
    damagedStore();
    const before = fullHash(dir);
    const r = pq(['salvage', dir, saved]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain(`copied 3 item(s), 14 B, into ${saved}; 1 acked record(s) left out`);
    expect(r.stdout).toMatch(/damaged at offset \d+: damaged frame followed by valid data/);
    expect(r.stdout).toMatch(/^ {2}bytes \d+\.\.\d+ damaged; lost seq 3$/m);
    expect(r.stdout).toContain('lost 1 item(s): seq 3\n');
    expect(r.stdout).toContain('seqs renumbered: 2 -> 1, 4..5 -> 2..3\n');
    expect(pq(['dump', saved, '--format', 'text']).stdout).toBe('bravo\ndelta\necho\n');
    expect(fullHash(dir)).toBe(before);
    expect(readdirSync(dir), 'no lock file taken').not.toContain('LOCK');
  });

  it('printsTheWholeReportAsJson', () => {
    damagedStore();
    const r = pq(['salvage', dir, saved, '--json']);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({
      copied: 3,
      acked: 1,
      lost: { count: 1, seqs: [{ first: 3, last: 3 }] },
      seqMap: [
        { from: 2, to: 1, count: 1 },
        { from: 4, to: 2, count: 2 },
      ],
    });
    expect(report.damaged).toEqual([expect.objectContaining({ file: expect.stringContaining(dir), lostSeqs: [{ first: 3, last: 3 }] })]);
  });

  it('aSoundStoreIsCopiedWhole', () => {
    pushStored(dir, ['--create', 'one', 'two']);
    const r = pq(['salvage', dir, saved]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('lost nothing\nseqs unchanged (1..2)\n');
    expect(pq(['dump', saved, '--format', 'text']).stdout).toBe('one\ntwo\n');
  });

  it('refusesADestinationThatIsNotEmptyAndLeavesItAsItWas', () => {
    damagedStore();
    mkdirSync(saved);
    writeFileSync(join(saved, 'mine.txt'), 'keep');
    const before = [fullHash(dir), fullHash(saved)];
    let r = pq(['salvage', dir, saved]);
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expect(r.stderr).toMatch(/^pq: ERR_EXISTS: .*exists and is a directory that is not empty.*\n$/);
    r = pq(['salvage', dir, saved, '--json']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr)).toMatchObject({ code: 'ERR_EXISTS', file: saved });
    expect([fullHash(dir), fullHash(saved)]).toEqual(before);
  });

  it('usageMistakesExitTwoAndCreateNothing', () => {
    damagedStore();
    const before = fullHash(dir);
    expect(pq(['salvage', dir])).toMatchObject({
      code: 2,
      stderr: 'pq: pq salvage takes <src> and <dst>, got 1 argument(s) (see pq salvage --help)\n',
    });
    const inside = pq(['salvage', dir, join(dir, 'copy')]);
    expect(inside.code).toBe(2);
    expect(inside.stderr).toMatch(/^pq: Expected `dst` to lie outside `src`.*\(see pq salvage --help\)\n$/);
    expect(fullHash(dir)).toBe(before);
    const missing = pq(['salvage', join(work, 'nope'), saved]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^pq: ERR_NOT_FOUND: No store at .*: no such directory/);
    expect(existsSync(saved)).toBe(false);
  });

  it('showsProgressOnlyWhenStderrIsATerminal', () => {
    damagedStore();
    expect(pq(['salvage', dir, saved]).stderr).toBe('');
    const shown = pq(['salvage', dir, join(work, 'again')], STDERR_IS_A_TTY);
    expect(shown.code).toBe(0);
    expect(shown.stderr).toMatch(/salvaging \[#+\] /);
    expect(shown.stderr.endsWith('\r\x1b[K')).toBe(true);
    expect(pq(['salvage', dir, join(work, 'third'), '--json'], STDERR_IS_A_TTY).stderr).toBe('');
  });
});

describe('pq verify on damage', () => {
  it('namesTheLostSeqAndCountsTheRecordsAfterTheDamage', () => {
    damagedStore();
    const r = pq(['verify', dir]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^checked 2 file\(s\), 4 record\(s\), /);
    expect(r.stdout).toMatch(/^ {2}bytes \d+\.\.\d+ damaged; lost seq 3$/m);
    expect(r.stdout).not.toMatch(/cursor checkpoint covers/);
    expect(r.stdout).toMatch(/1 problem\(s\)\n$/);
  });
});
