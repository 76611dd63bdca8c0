/**
 * LogStore's read-only open: no lock, no byte written, created or deleted, while another process
 * holds the store and keeps writing, rolling and compacting it; a consistent state as of the open.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isQueueError } from '../../../src/contract/errors.js';
import { LogStore, nodeFileSystem, salvageStore, verifyStore } from '../../../src/stores/log/log-store.js';
import { distUrl, root, runModule, type Lines } from '../../support/child-process.js';
import { WrappedFs, cleanupDirs, dec, errno, flipByte, freshDir, items, openStore, segFiles } from './helpers.js';

afterEach(cleanupDirs);

/** Name, size, mtime and content of every entry: a read-only open must leave all of them alone. */
function fingerprint(dir: string): string {
  const h = createHash('sha256');
  for (const n of fs.readdirSync(dir).sort()) {
    const st = fs.statSync(join(dir, n));
    h.update(`${n}:${st.size}:${st.mtimeMs}:`);
    if (st.isFile()) h.update(fs.readFileSync(join(dir, n)));
  }
  return h.digest('hex');
}

/**
 * A writer that pushes `p<i>` as seq i+1 in batches, a consumer that acks in order behind it,
 * small segments so that rolls, segment deletion and compaction happen all the time; `pause` and
 * `resume` on stdin stop and restart both.
 */
const WRITER = `
import { Builder, LogStore } from ${JSON.stringify(distUrl('index.js'))};
import { createInterface } from 'node:readline';
const store = await LogStore.open(process.argv[2], { segmentBytes: 16 * 1024, cursorCheckpointBytes: 2048 });
// A bounded backlog, paced pushes: the test reads the whole backlog at every snapshot.
const [tx, rx] = await new Builder(store).durability('group').capacity(3000).open();
let paused = false, pushing = false, acking = false, next = 0;
// The consumer stops only once the producer is idle: a push may be waiting for capacity. Then
// the store's background work (checkpoints, segment deletion, compaction) is let finish, and the
// acks written since the last sync are synced, so that nothing changes the files while paused.
let reported = false;
const idle = () => {
  if (!paused || pushing || acking || reported) return;
  reported = true;
  store.settled().then(() => store.sync()).then(() => store.settled()).then(() => console.log('paused'));
};
createInterface({ input: process.stdin }).on('line', (l) => {
  if (l === 'pause') { paused = true; idle(); }
  if (l === 'resume') { paused = false; reported = false; console.log('resumed'); }
});
console.log('ready');
const nap = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  for (;;) {
    if (paused) { await nap(5); continue; }
    pushing = true;
    await tx.pushMany(Array.from({ length: 50 }, () => 'p' + next++));
    console.log('pushed ' + next);
    pushing = false; idle();
    await nap(1);
  }
})();
(async () => {
  for (;;) {
    if (paused && !pushing) { await nap(5); continue; }
    acking = true;
    const item = rx.tryReserve();
    if (item) await item.ack(); else await nap(1);
    acking = false; idle();
  }
})();
`;

function pushedSoFar(lines: string[]): number {
  for (let i = lines.length - 1; i >= 0; i--) if (lines[i]!.startsWith('pushed ')) return Number(lines[i]!.slice(7));
  return 0;
}

/** Open read-only and check the view against itself: every item is `p<seq-1>`, in order, `count` of them. */
async function readOnlySnapshot(dir: string, writerPid: number | undefined): Promise<{ count: number; nextSeq: number; first: number }> {
  const store = await LogStore.open(dir, { readOnly: true });
  try {
    const s = store.inspect();
    // The writer holds the store: its tail is a write in progress, never a torn tail.
    expect(s.liveWriter).toEqual({ pid: writerPid });
    expect(s.recovery).toMatchObject({ tornBytes: 0, zeroTailBytes: 0 });
    const got = store.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 10_000_000 });
    expect(got.length, 'items read = inspect().count').toBe(s.count);
    let prev = 0;
    for (const item of got) {
      const text = dec(item.bytes);
      if (item.seq <= prev || item.seq < s.lowWaterMark || item.seq >= s.nextSeq || text !== `p${item.seq - 1}`) {
        throw new Error(`inconsistent view: seq ${item.seq} holds '${text}' after seq ${prev}; lwm ${s.lowWaterMark}, next ${s.nextSeq}`);
      }
      prev = item.seq;
    }
    return { count: s.count, nextSeq: s.nextSeq, first: got[0]?.seq ?? 0 };
  } finally {
    await store.close();
  }
}

describe('read-only open beside a live writer in another process', () => {
  it('sees a consistent state while the writer runs, and changes nothing', async () => {
    const dir = freshDir();
    fs.mkdirSync(join(dir, '..'), { recursive: true });
    const writer: Lines = runModule(join(dir, '..'), 'writer.mjs', WRITER, [dir]);
    try {
      await writer.until((l) => pushedSoFar(l) >= 3000);
      // Opened over and over while the writer pushes, acks, rolls, deletes and compacts segments.
      let snapshots = 0;
      let firstNext = 0;
      let lastNext = 0;
      // At least 1.5 s and 20 snapshots, and until the writer appended 1000 items meanwhile (a
      // loaded machine writes slower), within 40 s.
      const until = Date.now() + 1500;
      const giveUp = Date.now() + 40_000;
      while ((Date.now() < until || snapshots < 20 || lastNext - firstNext <= 1000) && Date.now() < giveUp) {
        const snap = await readOnlySnapshot(dir, writer.child.pid);
        expect(snap.nextSeq).toBeGreaterThanOrEqual(lastNext);
        if (snapshots === 0) firstNext = snap.nextSeq;
        lastNext = snap.nextSeq;
        snapshots++;
        await new Promise((r) => setTimeout(r, 2));
      }
      expect(lastNext - firstNext, 'the writer kept writing between the snapshots').toBeGreaterThan(1000);

      writer.child.stdin!.write('pause\n');
      await writer.until((l) => l.includes('paused'));
      const before = fingerprint(dir);
      const snap = await readOnlySnapshot(dir, writer.child.pid);
      expect(snap.count).toBeGreaterThanOrEqual(0);
      const pq = (args: string[]): string =>
        execFileSync(process.execPath, [join(root, 'dist', 'cli', 'pq.js'), ...args], { encoding: 'utf8' });
      expect(JSON.parse(pq(['stats', dir, '--json']))).toMatchObject({ unacked: snap.count, nextSeq: snap.nextSeq });
      expect(pq(['dump', dir, '--format', 'text']).split('\n').filter(Boolean)).toHaveLength(snap.count);
      expect(fingerprint(dir), 'no byte, name, size or mtime changed').toBe(before);

      // A writable open is refused while the writer lives: read-only took nothing from it.
      await expect(LogStore.open(dir)).rejects.toMatchObject({ code: 'ERR_LOCKED' });
      writer.child.stdin!.write('resume\n');
      await writer.until((l) => l.includes('resumed'));
      const resumedAt = pushedSoFar(writer.lines);
      await writer.until((l) => pushedSoFar(l) >= resumedAt + 500);
    } finally {
      await writer.kill();
    }
    // After a SIGKILL: read-only sees the crashed store without cutting its tail.
    const before = fingerprint(dir);
    const crashed = await LogStore.open(dir, { readOnly: true });
    expect(crashed.recovery.cleanShutdown).toBe(false);
    expect(crashed.inspect().liveWriter).toBeNull();
    const seen = crashed.inspect().count;
    await crashed.close();
    expect(fingerprint(dir)).toBe(before);
    const { store, count } = await openStore(dir);
    expect(count).toBe(seen);
    await store.close();
  }, 60_000);
});

describe('read-only open', () => {
  it('refuses every write with ERR_READ_ONLY and keeps serving reads', async () => {
    const dir = freshDir();
    const { store: w, nextSeq } = await openStore(dir);
    await w.append(items(nextSeq, ['a', 'b', 'c']), true);
    await w.ack([nextSeq], true);
    await w.close();
    const before = fingerprint(dir);
    const ro = await LogStore.open(dir, { readOnly: true });
    const readOnly = (e: unknown): boolean => isQueueError(e, 'ERR_READ_ONLY');
    await expect(ro.append(items(nextSeq + 3, ['d']), true)).rejects.toSatisfy(readOnly);
    await expect(ro.ack([nextSeq + 1], true)).rejects.toSatisfy(readOnly);
    await expect(ro.compact()).rejects.toSatisfy(readOnly);
    await expect(ro.open()).rejects.toSatisfy(readOnly);
    expect(ro.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 10 }).map((i) => dec(i.bytes))).toEqual(['b', 'c']);
    expect(ro.inspect()).toMatchObject({ count: 2, nextSeq: nextSeq + 3, lowWaterMark: nextSeq + 1 });
    await ro.close();
    expect(fingerprint(dir)).toBe(before);
  });

  it('takes no lock and claims nothing: a writer may open the store in the same process meanwhile', async () => {
    const dir = freshDir();
    const { store: first, nextSeq } = await openStore(dir);
    await first.append(items(nextSeq, ['x']), true);
    const ro = await LogStore.open(dir, { readOnly: true });
    expect(ro.inspect().count).toBe(1);
    await first.close();
    const ro2 = await LogStore.open(dir, { readOnly: true });
    const { store: again } = await openStore(dir);
    expect(ro2.inspect().count).toBe(1);
    await Promise.all([ro.close(), ro2.close(), again.close()]);
  });

  it('reads segments the writer deleted or compacted after the open, as they were', async () => {
    const dir = freshDir();
    const { store: w, nextSeq: s } = await openStore(dir, { segmentBytes: 1024, autoCompact: false });
    for (let i = 0; i < 20; i++)
      await w.append(
        items(
          s + i * 4,
          ['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'b', 'c', 'd'].map((t) => `${t}${i}`),
        ),
        true,
      );
    const ro = await LogStore.open(dir, { readOnly: true, readAheadBytes: 64 });
    const want = ro.inspect().count;
    // The writer acks everything but the last item and compacts: sealed segments are deleted.
    await w.ack(
      Array.from({ length: 79 }, (_, i) => s + i),
      true,
    );
    await w.compact();
    expect(fs.readdirSync(dir).filter((n) => n.startsWith('seg-')).length).toBeLessThan(ro.inspect().segments.length);
    const got = ro.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 1000 });
    expect(got.length).toBe(want);
    expect(dec(got[0]!.bytes)).toBe('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa0');
    await ro.close();
    await w.close();
  });

  it('reads up to a torn tail without cutting it; the next writable open cuts it', async () => {
    const dir = freshDir();
    const { store: w, nextSeq: s } = await openStore(dir, { preallocate: false });
    await w.append(items(s, ['one', 'two']), true);
    await w.close();
    const seg = join(dir, fs.readdirSync(dir).find((n) => n.startsWith('seg-'))!);
    fs.appendFileSync(seg, Buffer.from([9, 9, 9, 9, 9, 9, 9]));
    const before = fingerprint(dir);
    const ro = await LogStore.open(dir, { readOnly: true });
    expect(ro.recovery).toMatchObject({ tornBytes: 7, tornFiles: [] });
    expect(ro.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 10 }).map((i) => dec(i.bytes))).toEqual(['one', 'two']);
    await ro.close();
    expect(fingerprint(dir)).toBe(before);
    const w2 = await LogStore.open(dir);
    expect(w2.recovery.tornBytes).toBe(7);
    await w2.close();
  });
});

describe('read-only open beside a writer that holds the store', () => {
  /** A store whose LOCK nobody holds, as far as a read-only open can tell: the same files read as a crashed store's. */
  function noHolderFs(): WrappedFs {
    const w = new WrappedFs(nodeFileSystem);
    w.lockHolder = () => null;
    return w;
  }

  it('aLiveWritersHalfWrittenFrameAndPreallocatedZerosAreNeitherTornNorCorrupt', async () => {
    const dir = freshDir();
    const { store: w, nextSeq: s } = await openStore(dir);
    await w.append(items(s, ['one', 'two', 'three']), true);
    const seg = join(dir, segFiles(dir)[0]!);
    const validEnd = w.inspect().segments[0]!.bytes;
    expect(fs.statSync(seg).size, 'the synced append preallocated zeros after its frames').toBeGreaterThan(validEnd + 1024);
    // A frame caught half written at the write position, the preallocated zeros after it.
    const fd = fs.openSync(seg, 'r+');
    fs.writeSync(fd, Buffer.from([0x2a, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7]), 0, 11, validEnd);
    fs.closeSync(fd);

    const ro = await LogStore.open(dir, { readOnly: true });
    expect(ro.inspect().liveWriter).toEqual({ pid: process.pid });
    expect(ro.recovery).toMatchObject({ tornBytes: 0, zeroTailBytes: 0 });
    expect(ro.inspect()).toMatchObject({ count: 3, nextSeq: s + 3 });
    expect(ro.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 10 }).map((i) => dec(i.bytes))).toEqual(['one', 'two', 'three']);
    await ro.close();
    // The same bytes with no live writer are a crash's torn tail, cut at the next writable open.
    const crashed = await LogStore.open(dir, { readOnly: true, fs: noHolderFs() });
    expect(crashed.inspect().liveWriter).toBeNull();
    expect(crashed.recovery.tornBytes).toBe(fs.statSync(seg).size - validEnd);
    await crashed.close();
    await w.close();
  });

  it('verifyAndSalvageReadALiveWritersHalfWrittenFrameAsAWriteInProgress', async () => {
    const dir = freshDir();
    const { store: w, nextSeq: s } = await openStore(dir);
    await w.append(items(s, ['one', 'two', 'three']), true);
    const seg = join(dir, segFiles(dir)[0]!);
    const fd = fs.openSync(seg, 'r+');
    fs.writeSync(fd, Buffer.from([0x2a, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7]), 0, 11, w.inspect().segments[0]!.bytes);
    fs.closeSync(fd);
    const live = `LOCK: process ${process.pid} has the store open and is writing it`;
    const v = verifyStore(dir);
    expect(v).toMatchObject({ problems: [], records: 3 });
    expect(v.notes.join('\n')).toContain(live);
    expect(v.notes.join('\n')).not.toMatch(/torn tail|zero bytes/);
    const r = await salvageStore(dir, join(dir, '..', 'saved'));
    expect(r).toMatchObject({ copied: 3, damaged: [], lost: { count: 0 } });
    expect(r.notes.join('\n')).toContain(live);
    // With no live writer the same bytes are a crash's torn tail, and verify says open will cut it.
    const crashed = verifyStore(dir, { fs: noHolderFs() });
    expect(crashed.problems).toEqual([]);
    expect(crashed.notes.join('\n')).toMatch(/torn tail of 11 bytes/);
    await w.close();
  });

  it('damageBelowTheDurablePointIsStillCorruptBesideALiveWriter', async () => {
    const dir = freshDir();
    const { store: first, nextSeq: s } = await openStore(dir);
    await first.append(items(s, ['one', 'two', 'three']), true);
    await first.close();
    // Reopened: its checkpoint makes every record so far durable; it keeps the store open.
    const { store: w } = await openStore(dir);
    const seg = join(dir, segFiles(dir)[0]!);
    flipByte(seg, fs.readFileSync(seg).indexOf('two'));
    const err = await LogStore.open(dir, { readOnly: true }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'OpenError', code: 'ERR_CORRUPT', file: seg });
    expect((err as Error).message).toMatch(/torn tail below the durable point \(tail table row 3\)/);
    await w.close();
  });

  it('damageInASealedSegmentIsStillCorruptBesideALiveWriter', async () => {
    const dir = freshDir();
    const { store: w, nextSeq: s } = await openStore(dir, { segmentBytes: 1024, autoCompact: false });
    for (let i = 0; i < 8; i++)
      await w.append(
        items(
          s + i * 4,
          ['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'b', 'c', 'd'].map((t) => `${t}${i}`),
        ),
        true,
      );
    const sealed = join(dir, segFiles(dir)[0]!);
    expect(segFiles(dir).length).toBeGreaterThan(1);
    flipByte(sealed, fs.readFileSync(sealed).indexOf('b0'));
    const ro = await LogStore.open(dir, { readOnly: true });
    expect(ro.inspect().liveWriter).toEqual({ pid: process.pid });
    // The items before the damage come back; the next read reports it.
    const before = ro.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 100 });
    expect(before.map((i) => i.seq)).toEqual([s]);
    expect(() => ro.read({ after: s, before: Number.MAX_SAFE_INTEGER, limit: 100 })).toThrow(
      expect.objectContaining({ code: 'ERR_CORRUPT', file: sealed }),
    );
    await ro.close();
    await w.close();
  });
});

describe('read-only open while files come and go', () => {
  const GHOST = 'seg-00000000000000000999.log';
  /** A segment the listing shows until an open of it fails (deleted meanwhile), or for ever. */
  function ghostFs(forever: boolean): WrappedFs {
    const w = new WrappedFs(nodeFileSystem);
    let gone = false;
    w.readdir = (p: string) => (gone ? nodeFileSystem.readdir(p) : [...nodeFileSystem.readdir(p), GHOST]);
    w.open = (p: string, mode, fileMode) => {
      if (p.endsWith(GHOST)) {
        gone = !forever;
        throw errno('ENOENT');
      }
      return nodeFileSystem.open(p, mode, fileMode);
    };
    return w;
  }

  it('plans again when the directory changed under the plan', async () => {
    const dir = freshDir();
    const { store, nextSeq } = await openStore(dir);
    await store.append(items(nextSeq, ['a', 'b']), true);
    await store.close();
    // Listed by the first fingerprint and the first plan, gone when the plan opens it.
    const ro = await LogStore.open(dir, { readOnly: true, fs: ghostFs(false) });
    expect(ro.read({ after: 0, before: Number.MAX_SAFE_INTEGER, limit: 10 }).map((i) => dec(i.bytes))).toEqual(['a', 'b']);
    await ro.close();
  });

  it('reports a failure over a directory that did not change instead of retrying it', async () => {
    const dir = freshDir();
    const { store } = await openStore(dir);
    await store.close();
    const fsys = ghostFs(true);
    const err = await LogStore.open(dir, { readOnly: true, fs: fsys }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'OpenError', code: 'ERR_STORE', cause: { code: 'ENOENT' } });
  });
});

describe('mustExist, and what open makes of a path', () => {
  it('a missing path or a directory without a store is ERR_NOT_FOUND and nothing is created', async () => {
    const dir = freshDir();
    for (const options of [{ mustExist: true }, { readOnly: true }]) {
      await expect(LogStore.open(dir, options)).rejects.toMatchObject({ name: 'OpenError', code: 'ERR_NOT_FOUND' });
      expect(fs.existsSync(dir)).toBe(false);
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(join(dir, '.DS_Store'), 'finder');
      await expect(LogStore.open(dir, options)).rejects.toMatchObject({ name: 'OpenError', code: 'ERR_NOT_FOUND' });
      expect(fs.readdirSync(dir)).toEqual(['.DS_Store']);
      fs.rmSync(dir, { recursive: true });
    }
    await expect(LogStore.open(dir, { readOnly: true, mustExist: false })).rejects.toThrow(TypeError);
    await expect(LogStore.open(dir, { readOnly: 'yes' as never })).rejects.toThrow(TypeError);
  });

  it('a desktop metadata file is tolerated; any other stranger is still refused', async () => {
    const dir = freshDir();
    fs.mkdirSync(dir, { recursive: true });
    for (const n of ['.DS_Store', 'Thumbs.db', 'desktop.ini']) fs.writeFileSync(join(dir, n), 'x');
    const { store, nextSeq } = await openStore(dir);
    await store.append(items(nextSeq, ['kept']), true);
    await store.close();
    const again = await LogStore.open(dir);
    expect(again.inspect().count).toBe(1);
    await again.close();
    expect(fs.readFileSync(join(dir, '.DS_Store'), 'utf8')).toBe('x');
    fs.writeFileSync(join(dir, 'notes.txt'), 'mine');
    await expect(LogStore.open(dir)).rejects.toMatchObject({ code: 'ERR_STORE' });
    await expect(LogStore.open(dir, { readOnly: true })).rejects.toMatchObject({ code: 'ERR_STORE' });
  });

  it('a new store says so; its next open reports a clean shutdown of an existing store', async () => {
    const dir = freshDir();
    const first = await LogStore.open(dir);
    expect(first.recovery).toMatchObject({ created: true, cleanShutdown: true });
    await first.close();
    const second = await LogStore.open(dir);
    expect(second.recovery).toMatchObject({ created: false, cleanShutdown: true });
    await second.close();
  });

  it('a file in the path, or a permission error, is OpenError ERR_STORE with the errno error as cause', async () => {
    const dir = freshDir();
    fs.mkdirSync(join(dir, '..'), { recursive: true });
    const file = join(dir, '..', 'plain-file');
    fs.writeFileSync(file, 'x');
    const err = await LogStore.open(join(file, 'sub')).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'OpenError', code: 'ERR_STORE', cause: { code: 'ENOTDIR' } });
    // Root is never refused by the kernel, so the permission error comes from a file system
    // that answers as an unreadable directory would.
    const denied = new WrappedFs(nodeFileSystem);
    denied.stat = () => {
      throw errno('EACCES');
    };
    for (const options of [{}, { readOnly: true }, { mustExist: true }]) {
      const e = await LogStore.open(dir, { ...options, fs: denied }).catch((x: unknown) => x);
      expect(e).toMatchObject({ name: 'OpenError', code: 'ERR_STORE', cause: { code: 'EACCES' } });
      expect((e as Error).message).toContain('permission denied');
    }
    const unreadable = new WrappedFs(nodeFileSystem);
    fs.mkdirSync(dir, { recursive: true });
    unreadable.readdir = () => {
      throw errno('EACCES');
    };
    for (const options of [{}, { readOnly: true }, { mustExist: true }]) {
      const e = await LogStore.open(dir, { ...options, fs: unreadable }).catch((x: unknown) => x);
      expect(e).toMatchObject({ name: 'OpenError', code: 'ERR_STORE', cause: { code: 'EACCES' } });
    }
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});
