/**
 * docs/internals/architecture.md's "Architecture, file by file" keeps up with src/: it names every
 * file of the contract (src/contract/), the helpers (src/lib/), the file-system port (src/fs/), the
 * core (src/core/), the stores and the log store's engine (src/stores/), effectivelyOnce
 * (src/once/) and the conformance suite (src/conformance/), and every other directory of src/; and
 * every file it names exists. A file added without a line there, or one renamed or
 * removed under it, fails here.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { docText, root } from '../support/docs.js';

const ARCHITECTURE = 'docs/internals/architecture.md';

/** The text of the file map's section, "Architecture, file by file", up to the next heading of its level or above. */
function fileMapOf(page: string): string {
  const start = page.indexOf('\n## Architecture, file by file\n');
  expect(start, `${ARCHITECTURE} has "Architecture, file by file"`).toBeGreaterThan(0);
  const next = page.slice(start + 1).search(/\n#{1,2} /);
  return page.slice(start, next < 0 ? undefined : start + 1 + next);
}

/**
 * Whether `map` names `path` (`src/dir/name.ts`): in full, or as `name.ts` on a line or table row
 * that names its directory (`src/stores/log/engine/crc.ts`, `frame.ts`, ...).
 */
function names(map: string, path: string): boolean {
  if (map.includes(`\`${path}\``)) return true;
  const dir = path.slice(0, path.lastIndexOf('/') + 1);
  const base = path.slice(dir.length);
  return map.split('\n').some((line) => line.includes(`\`${dir}`) && line.includes(`\`${base}\``));
}

/** The directories whose every file the map names, with their subdirectories; the others it names as directories. */
const MAPPED_DIRS = ['src/contract', 'src/lib', 'src/fs', 'src/core', 'src/stores', 'src/once', 'src/conformance'];

/** The `.ts` files under `dir` (a path from the root), at any depth. */
function filesUnder(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(`${dir}/${e.name}`) : e.name.endsWith('.ts') ? [`${dir}/${e.name}`] : [],
  );
}

it('designsFileMapNamesEveryFileOfTheEngineAndTheCoreAndEveryOtherDirectoryOfSrc', () => {
  const map = fileMapOf(docText(ARCHITECTURE));
  const files = MAPPED_DIRS.flatMap(filesUnder);
  expect(files.length).toBeGreaterThan(110);
  expect(files.filter((f) => !names(map, f))).toEqual([]);
  const dirs = readdirSync(join(root, 'src'), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => `src/${e.name}/`);
  expect(dirs.filter((d) => !map.includes(`\`${d}`))).toEqual([]);
});

it('everyFileDesignsFileMapNamesExists', () => {
  const map = fileMapOf(docText(ARCHITECTURE));
  const named = [...map.matchAll(/`(src\/[\w/.-]+\.ts)`/g)].map((m) => m[1]!);
  expect(named.length).toBeGreaterThan(60);
  expect(named.filter((path) => !existsSync(join(root, path)))).toEqual([]);
});

it('theCheckCatchesAFileTheMapDoesNotName', () => {
  const map = '| `src/stores/log/engine/crc.ts`, `frame.ts` | codecs |\n`src/core/queue-core.ts` (the core)\n';
  expect(names(map, 'src/stores/log/engine/frame.ts')).toBe(true);
  expect(names(map, 'src/core/queue-core.ts')).toBe(true);
  expect(names(map, 'src/stores/log/engine/identity.ts')).toBe(false);
  expect(names(map, 'src/queue/frame.ts')).toBe(false);
});
