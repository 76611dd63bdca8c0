/**
 * The root package installs and imports with zero native dependencies: the SQLite and LevelDB
 * backends are optional peers behind their own subpath exports, loaded only when a store opens.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { distUrl, root } from './support/child-process.js';

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  exports: Record<string, string | { types: string; default: string }>;
};

const PEERS = ['better-sqlite3', 'classic-level'];

test('dependencies hold only crc-32, which is pure JavaScript', () => {
  expect(Object.keys(pkg.dependencies ?? {})).toEqual(['crc-32']);
  const crc = JSON.parse(readFileSync(join(root, 'node_modules', 'crc-32', 'package.json'), 'utf8')) as Record<string, unknown>;
  expect(crc.gypfile, 'crc-32 builds nothing').toBeUndefined();
  expect((crc.scripts as Record<string, string> | undefined)?.install).toBeUndefined();
});

test('the native backends are optional peer dependencies', () => {
  for (const peer of PEERS) {
    expect(pkg.peerDependencies?.[peer], `${peer} in peerDependencies`).toBeDefined();
    expect(pkg.peerDependenciesMeta?.[peer]?.optional, `${peer} is optional`).toBe(true);
  }
  expect(pkg.peerDependencies?.['better-sqlite3']).toMatch(/^\^12\b/);
});

test('persistent-queue/sqlite and persistent-queue/level are exported, types first, ./package.json last', () => {
  const keys = Object.keys(pkg.exports);
  expect(keys.at(-1)).toBe('./package.json');
  for (const [subpath, file] of [
    ['./sqlite', 'sqlite-store'],
    ['./level', 'level-store'],
  ] as const) {
    const entry = pkg.exports[subpath];
    expect(entry).toEqual({ types: `./dist/${file}.d.ts`, default: `./dist/${file}.js` });
    expect(Object.keys(entry as object)[0]).toBe('types');
    expect(existsSync(join(root, 'dist', `${file}.js`)), `dist/${file}.js is built`).toBe(true);
  }
});

/**
 * What a fresh `node` process has loaded after running `body`: the CommonJS modules in require's
 * cache (both peers are CommonJS, and ESM imports of CommonJS land there too), the builtins Node
 * loaded (`process.moduleLoadList`, where node:sqlite would show), and the shared objects in the
 * process (every native addon, whoever loaded it).
 */
function loadedAfter(body: string): { cjs: string[]; builtins: string[]; sharedObjects: string[] } {
  const dir = mkdtempSync(join(tmpdir(), 'pq-packaging-'));
  try {
    const file = join(dir, 'probe.mjs');
    writeFileSync(
      file,
      `import { createRequire } from 'node:module';
const dir = process.argv[2];
${body}
const cjs = Object.keys(createRequire(import.meta.url).cache);
const builtins = process.moduleLoadList ?? [];
const sharedObjects = process.report.getReport().sharedObjects;
console.log(JSON.stringify({ cjs, builtins, sharedObjects }));
`,
    );
    return JSON.parse(execFileSync(process.execPath, [file, dir], { encoding: 'utf8' })) as ReturnType<typeof loadedAfter>;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const peersIn = (loaded: ReturnType<typeof loadedAfter>): string[] => [
  ...loaded.cjs.filter((f) => PEERS.some((p) => f.includes(`node_modules/${p}/`))),
  ...loaded.builtins.filter((m) => /sqlite/i.test(m)),
  ...loaded.sharedObjects.filter((f) => f.endsWith('.node')),
];

test('importing the package root (and both backend modules) loads no peer and no native addon', () => {
  const loaded = loadedAfter(`
const root = await import(${JSON.stringify(distUrl('index.js'))});
await import(${JSON.stringify(distUrl('sqlite-store.js'))});
await import(${JSON.stringify(distUrl('level-store.js'))});
const [tx, rx] = await new root.Builder(new root.MemStore()).open();
await tx.push('x');
await tx.close();
`);
  expect(peersIn(loaded)).toEqual([]);
});

test('the probe sees a peer once a store opens (so the check above can fail)', () => {
  const sqlite = loadedAfter(`
const { SqliteStore } = await import(${JSON.stringify(distUrl('sqlite-store.js'))});
await (await SqliteStore.open(dir + '/q.db', { driver: 'better-sqlite3' })).close();
`);
  expect(peersIn(sqlite).some((f) => f.includes('better-sqlite3') || f.includes('better_sqlite3'))).toBe(true);
  const level = loadedAfter(`
const { LevelStore } = await import(${JSON.stringify(distUrl('level-store.js'))});
await (await LevelStore.open(dir + '/q')).close();
`);
  expect(peersIn(level).some((f) => f.includes('classic-level'))).toBe(true);
});
