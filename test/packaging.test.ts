/**
 * The root package installs and imports with zero native dependencies: the SQLite and LevelDB
 * backends are optional peers behind their own subpath exports, loaded only when a store opens.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

test('persistent-queue/jetstream is exported types first, and the root does not load the NATS client', () => {
  expect(pkg.exports['./jetstream']).toEqual({ types: './dist/jetstream/index.d.ts', default: './dist/jetstream/index.js' });
  expect(Object.keys(pkg.exports['./jetstream'] as object)[0]).toBe('types');
  for (const peer of ['@nats-io/jetstream', '@nats-io/transport-node']) expect(pkg.peerDependenciesMeta?.[peer]?.optional, `${peer} is optional`).toBe(true);
  const nats = (loaded: ReturnType<typeof loadedAfter>) => loaded.cjs.filter((f) => f.includes('node_modules/@nats-io/'));
  expect(nats(loadedAfter(`await import(${JSON.stringify(distUrl('index.js'))});`))).toEqual([]);
  // The probe sees the client once the subpath is imported: the check above can fail.
  expect(nats(loadedAfter(`await import(${JSON.stringify(distUrl('jetstream/index.js'))});`)).length).toBeGreaterThan(0);
});

// ------------------------------------------------------------------------- the published package

interface PackedFile {
  path: string;
}

/** The files `npm pack` puts in the tarball, from its own listing. */
function packedFiles(): string[] {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' });
  return ((JSON.parse(out) as { files: PackedFile[] }[])[0]!.files ?? []).map((f) => f.path);
}

test('the package carries an MIT LICENSE and says where it lives', () => {
  const license = readFileSync(join(root, 'LICENSE'), 'utf8');
  expect(license).toMatch(/^MIT License\n/);
  expect(license).toContain('Copyright (c) 2026 persistent-queue contributors');
  expect(license).toContain('THE SOFTWARE IS PROVIDED "AS IS"');
  const meta = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Record<string, unknown>;
  expect(meta.license).toBe('MIT');
  expect(meta.repository).toEqual({ type: 'git', url: 'git+https://github.com/persistent-queue/persistent-queue.git' });
  expect(meta.homepage).toBe('https://github.com/persistent-queue/persistent-queue#readme');
  expect(meta.bugs).toEqual({ url: 'https://github.com/persistent-queue/persistent-queue/issues' });
  expect(Array.isArray(meta.keywords) && meta.keywords.length >= 5).toBe(true);
  expect(meta.type, 'ESM only').toBe('module');
  expect(packedFiles()).toContain('LICENSE');
});

test('the README says the package is ESM only and how CommonJS loads it', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  expect(readme).toMatch(/ESM only/);
  expect(readme).toContain("await import('persistent-queue')");
});

test('no internal member reaches the published declarations', () => {
  const files = packedFiles();
  const declarations = files.filter((f) => f.endsWith('.d.ts'));
  expect(declarations).toContain('dist/queue.d.ts');
  for (const file of declarations) {
    const text = readFileSync(join(root, file), 'utf8');
    expect(text, file).not.toContain('@internal');
    expect(text, file).not.toMatch(/\bmarkSettled\b/);
    expect(text, file).not.toMatch(/\bQueueCore\b/);
  }
  // The member is there in the JavaScript: the search above looks in the right place.
  expect(readFileSync(join(root, 'dist', 'queue', 'reserved.js'), 'utf8')).toMatch(/\bmarkSettled\b/);
});

test('every shipped source map carries the sources it maps', () => {
  const maps = packedFiles().filter((f) => f.endsWith('.map'));
  expect(maps).toContain('dist/queue.js.map');
  for (const file of maps) {
    const map = JSON.parse(readFileSync(join(root, file), 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] };
    expect(map.sourcesContent?.length, file).toBe(map.sources.length);
    for (const content of map.sourcesContent ?? []) expect(typeof content === 'string' && content.length > 0, file).toBe(true);
  }
});

/** Runs a tool from node_modules/.bin the way `npx` would, without any network. */
function tool(name: string, args: string[]) {
  const r = spawnSync(join(root, 'node_modules', '.bin', name), args, { cwd: root, encoding: 'utf8', env: { ...process.env, npm_config_offline: 'true', NO_COLOR: '1' } });
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

test('publint finds nothing to fix', () => {
  const r = tool('publint', ['--strict']);
  expect(r.code, r.output).toBe(0);
});

test('arethetypeswrong resolves every entry point for ESM and bundlers', () => {
  const r = tool('attw', ['--pack', '.', '--profile', 'esm-only']);
  expect(r.code, r.output).toBe(0);
  expect(r.output).not.toContain('🔴');
});

test('the installed pq runs through its bin symlink', () => {
  const work = mkdtempSync(join(tmpdir(), 'pq-install-'));
  try {
    const packed = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: root, encoding: 'utf8' }),
    ) as { filename: string }[];
    const tarball = join(work, packed[0]!.filename);
    const app = join(work, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--ignore-scripts', tarball], { cwd: app, encoding: 'utf8' });
    const link = join(app, 'node_modules', '.bin', 'pq');
    expect(lstatSync(link).isSymbolicLink(), 'npm links the bin').toBe(true);
    const npx = (args: string[]) => {
      const r = spawnSync('npx', ['--no-install', 'pq', ...args], { cwd: app, encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
      return { code: r.status, stdout: r.stdout, stderr: r.stderr };
    };
    const help = npx(['--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: pq <command>/);
    expect(npx(['push', 'q', '--create', 'alpha', 'beta'])).toMatchObject({ code: 0, stdout: '1\n2\n' });
    const stats = npx(['stats', 'q', '--json']);
    expect(stats.code, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout)).toMatchObject({ unacked: 2, firstSeq: 1, nextSeq: 3 });
    const missing = npx(['stats', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^pq: ERR_NOT_FOUND: No store at .*nope: no such directory\n$/);
    expect(existsSync(join(app, 'nope'))).toBe(false);
    // The symlink run directly, as a shell finds it on PATH after a global install.
    const direct = spawnSync(link, ['--help'], { cwd: app, encoding: 'utf8' });
    expect(direct.status).toBe(0);
    expect(direct.stdout).toMatch(/^Usage: pq <command>/);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
