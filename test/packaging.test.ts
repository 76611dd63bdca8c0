/**
 * The root package installs and imports with zero native dependencies: the SQLite and LevelDB
 * backends are optional peers behind their own subpath exports, loaded only when a store opens.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { distUrl, root } from './support/child-process.js';
import { docFiles, docText } from './support/docs.js';
import { takeSpoolIn } from './support/pq-cli.js';

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
    ['./sqlite', 'stores/sqlite/index'],
    ['./level', 'stores/level/index'],
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
await import(${JSON.stringify(distUrl('stores/sqlite/index.js'))});
await import(${JSON.stringify(distUrl('stores/level/index.js'))});
const [tx, rx] = await new root.Builder(new root.MemStore()).open();
await tx.push('x');
await tx.close();
`);
  expect(peersIn(loaded)).toEqual([]);
});

test('the probe sees a peer once a store opens (so the check above can fail)', () => {
  const sqlite = loadedAfter(`
const { SqliteStore } = await import(${JSON.stringify(distUrl('stores/sqlite/index.js'))});
await (await SqliteStore.open(dir + '/q.db', { driver: 'better-sqlite3' })).close();
`);
  expect(peersIn(sqlite).some((f) => f.includes('better-sqlite3') || f.includes('better_sqlite3'))).toBe(true);
  const level = loadedAfter(`
const { LevelStore } = await import(${JSON.stringify(distUrl('stores/level/index.js'))});
await (await LevelStore.open(dir + '/q')).close();
`);
  expect(peersIn(level).some((f) => f.includes('classic-level'))).toBe(true);
});

test('cron-parser is an optional peer, loaded only once a cron schedule is met', () => {
  expect(pkg.peerDependencies?.['cron-parser']).toMatch(/^\^5\b/);
  expect(pkg.peerDependenciesMeta?.['cron-parser']?.optional).toBe(true);
  const cron = (loaded: ReturnType<typeof loadedAfter>) => loaded.cjs.filter((f) => f.includes('node_modules/cron-parser/'));
  const every = loadedAfter(`
const root = await import(${JSON.stringify(distUrl('index.js'))});
const [tx] = await new root.Builder(new root.MemStore()).open();
await tx.schedule('tick', { everyMs: 60000 }, 'x');
await tx.close();
`);
  expect(cron(every)).toEqual([]);
  const cronned = loadedAfter(`
const root = await import(${JSON.stringify(distUrl('index.js'))});
const [tx] = await new root.Builder(new root.MemStore()).open();
await tx.schedule('nightly', { cron: '0 3 * * *' }, 'x');
await tx.close();
`);
  expect(cron(cronned).length).toBeGreaterThan(0);
});

test('persistent-queue/jetstream is exported types first, and the root does not load the NATS client', () => {
  expect(pkg.exports['./jetstream']).toEqual({
    types: './dist/engines/jetstream/index.d.ts',
    default: './dist/engines/jetstream/index.js',
  });
  expect(Object.keys(pkg.exports['./jetstream'] as object)[0]).toBe('types');
  for (const peer of ['@nats-io/jetstream', '@nats-io/transport-node'])
    expect(pkg.peerDependenciesMeta?.[peer]?.optional, `${peer} is optional`).toBe(true);
  const nats = (loaded: ReturnType<typeof loadedAfter>) => loaded.cjs.filter((f) => f.includes('node_modules/@nats-io/'));
  expect(nats(loadedAfter(`await import(${JSON.stringify(distUrl('index.js'))});`))).toEqual([]);
  // The probe sees the client once the subpath is imported: the check above can fail.
  expect(nats(loadedAfter(`await import(${JSON.stringify(distUrl('engines/jetstream/index.js'))});`)).length).toBeGreaterThan(0);
});

test('persistent-queue/dashboard is exported types first, and only it loads node:http', () => {
  expect(pkg.exports['./dashboard']).toEqual({ types: './dist/dashboard/index.d.ts', default: './dist/dashboard/index.js' });
  expect(Object.keys(pkg.exports['./dashboard'] as object)[0]).toBe('types');
  const http = (loaded: ReturnType<typeof loadedAfter>) => loaded.builtins.filter((m) => m === 'NativeModule http');
  expect(http(loadedAfter(`await import(${JSON.stringify(distUrl('index.js'))});`))).toEqual([]);
  // The probe sees node:http once the subpath is imported: the check above can fail.
  expect(http(loadedAfter(`await import(${JSON.stringify(distUrl('dashboard/index.js'))});`))).toEqual(['NativeModule http']);
});

// ------------------------------------------------------------------------- the published package

interface PackedFile {
  path: string;
}

/**
 * The files `npm pack` puts in the tarball, from its own listing. Packing this tree passes
 * --ignore-scripts: its prepack would rebuild dist/ under the other test files reading it.
 */
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
  expect(declarations).toContain('dist/core/builder.d.ts');
  for (const file of declarations) {
    const text = readFileSync(join(root, file), 'utf8');
    expect(text, file).not.toContain('@internal');
    expect(text, file).not.toMatch(/\bmarkSettled\b/);
    expect(text, file).not.toMatch(/\bQueueCore\b/);
  }
  // The member is there in the JavaScript: the search above looks in the right place.
  expect(readFileSync(join(root, 'dist', 'core', 'reserved.js'), 'utf8')).toMatch(/\bmarkSettled\b/);
});

test('every shipped source map carries the sources it maps', () => {
  const maps = packedFiles().filter((f) => f.endsWith('.map'));
  expect(maps).toContain('dist/core/builder.js.map');
  for (const file of maps) {
    const map = JSON.parse(readFileSync(join(root, file), 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] };
    expect(map.sourcesContent?.length, file).toBe(map.sources.length);
    for (const content of map.sourcesContent ?? []) expect(typeof content === 'string' && content.length > 0, file).toBe(true);
  }
});

/** Runs a tool from node_modules/.bin the way `npx` would, without any network. */
function tool(name: string, args: string[]) {
  const r = spawnSync(join(root, 'node_modules', '.bin', name), args, {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, npm_config_offline: 'true', NO_COLOR: '1' },
  });
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

test('publint finds nothing to fix', () => {
  const r = tool('publint', ['--strict']);
  expect(r.code, r.output).toBe(0);
});

// ------------------------------------------------------------------------- the tarball of a clean tree

/** What packCleanTree made. */
interface Packed {
  readonly work: string;
  readonly tarball: string;
  readonly files: string[];
  /** Whether the copied tree had a dist/ before `npm pack` ran. */
  readonly hadDist: boolean;
}

let packedOnce: Packed | undefined;

/**
 * The tarball `npm pack` makes from a tree as a clone has it: the files git tracks or would track
 * (the ignored ones, dist/ among them, left out), copied to a temporary directory with the
 * repository's node_modules linked in for the build. `npm pack` runs there with its scripts, as a
 * publisher runs it. Made once; every test below installs this tarball.
 */
function packCleanTree(): Packed {
  if (packedOnce) return packedOnce;
  const work = mkdtempSync(join(tmpdir(), 'pq-pack-'));
  const tree = join(work, 'tree');
  const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: root,
    encoding: 'utf8',
  }).split('\0');
  for (const file of listed) {
    // node_modules is a symlink in some checkouts, which the ignore rule (a directory) does not cover.
    if (file === '' || file === 'node_modules' || !existsSync(join(root, file)) || !lstatSync(join(root, file)).isFile()) continue;
    mkdirSync(dirname(join(tree, file)), { recursive: true });
    copyFileSync(join(root, file), join(tree, file));
  }
  symlinkSync(join(root, 'node_modules'), join(tree, 'node_modules'));
  const hadDist = existsSync(join(tree, 'dist'));
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', work], {
    cwd: tree,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const report = (JSON.parse(out) as { filename: string; files: PackedFile[] }[])[0]!;
  packedOnce = { work, tarball: join(work, report.filename), files: report.files.map((f) => f.path), hadDist };
  return packedOnce;
}

afterAll(() => {
  if (packedOnce) rmSync(packedOnce.work, { recursive: true, force: true });
});

test('npm pack on a clean tree builds dist/ and packs what the built tree packs', () => {
  const packed = packCleanTree();
  expect(packed.hadDist, 'the copied tree has no dist/ of its own').toBe(false);
  for (const entry of Object.values(pkg.exports)) {
    for (const file of typeof entry === 'string' ? [entry] : [entry.types, entry.default])
      expect(packed.files).toContain(file.replace(/^\.\//, ''));
  }
  expect(packed.files).toContain('dist/cli/pq.js');
  expect([...packed.files].sort()).toEqual([...packedFiles()].sort());
});

test('arethetypeswrong resolves every entry point for ESM and bundlers', () => {
  // attw --pack would run npm pack with its scripts in this tree: it checks the clean tree's tarball instead.
  const r = tool('attw', [packCleanTree().tarball, '--profile', 'esm-only']);
  expect(r.code, r.output).toBe(0);
  expect(r.output).not.toContain('🔴');
});

// ------------------------------------------------------------------------- an app that installed it

/**
 * The NATS clients the docs have a Node 20 app install for persistent-queue/jetstream: 3.4.0
 * depends on @nats-io/nuid 3.0.0, which declares Node 22 or later.
 */
const NATS_FOR_NODE_20 = ['@nats-io/transport-node@3.3.1', '@nats-io/jetstream@3.3.1'];

const apps = new Map<string, string>();

/**
 * A fresh app (`"type": "module"`) where npm installed the tarball and `extra` from the registry,
 * refusing any package whose engines exclude this Node, and with the repository's @types/node
 * linked in: the declarations name Node's types (Buffer, streams), as any Node app in TypeScript
 * has them. No peer is installed unless `extra` names it.
 */
function installedApp(name: string, extra: string[] = []): string {
  const known = apps.get(name);
  if (known) return known;
  const packed = packCleanTree();
  const app = join(packed.work, name);
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
  execFileSync(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', '--ignore-scripts', '--engine-strict', packed.tarball, ...extra],
    {
      cwd: app,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  mkdirSync(join(app, 'node_modules', '@types'), { recursive: true });
  symlinkSync(join(root, 'node_modules', '@types', 'node'), join(app, 'node_modules', '@types', 'node'));
  apps.set(name, app);
  return app;
}

test('the installed pq runs through its bin symlink', () => {
  const app = installedApp('bare');
  const link = join(app, 'node_modules', '.bin', 'pq');
  expect(lstatSync(link).isSymbolicLink(), 'npm links the bin').toBe(true);
  const npx = (args: string[]) => {
    const r = spawnSync('npx', ['--no-install', 'pq', ...args], { cwd: app, encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  const help = npx(['--help']);
  expect(help.code, help.stderr).toBe(0);
  expect(help.stdout).toMatch(/^Usage: pq <command>/);
  // No process has the queue open: the pushes are spooled, and the next open takes them in.
  expect(npx(['push', 'q', '--create', 'alpha', 'beta'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^spooled 2 item\(s\)/) });
  takeSpoolIn(join(app, 'q'));
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
});

test('the NATS clients the docs name for Node 20 install beside the tarball with engines enforced', () => {
  const command = `npm install ${NATS_FOR_NODE_20.join(' ')}`;
  expect(
    docFiles().filter((file) => docText(file).includes(command)),
    `the docs have ${command}`,
  ).toEqual(['docs/guides/scaling-out.md']);
  // npm refuses the install (ERESOLVE) when the peer range leaves them out, and (EBADENGINE) when
  // a package they pull declares engines this Node is not in.
  const app = fullApp();
  for (const spec of NATS_FOR_NODE_20) {
    const at = spec.lastIndexOf('@');
    const installed = JSON.parse(readFileSync(join(app, 'node_modules', spec.slice(0, at), 'package.json'), 'utf8')) as { version: string };
    expect(installed.version).toBe(spec.slice(at + 1));
  }
});

// ------------------------------------------------------------------------- a TypeScript app's compiler

/**
 * Every entry point but ./jetstream, each used through a few of its types. The `@ts-expect-error`
 * lines fail the compile if a type comes out as `any`.
 */
const CORE_APP = `import { Builder, MemStore, QueueError, json, type Consumer, type Producer, type QueueStats, type Reserved, type Store } from 'persistent-queue';
import { runStoreConformance, type ConformanceOptions } from 'persistent-queue/conformance';
import { CrashFileSystem, ManualClock, Prng, type Clock } from 'persistent-queue/testing';
import { SqliteStore, type SqliteStoreOptions } from 'persistent-queue/sqlite';
import { LevelStore, type LevelStoreOptions } from 'persistent-queue/level';
import { dashboard, type Dashboard, type DashboardOptions } from 'persistent-queue/dashboard';

export interface Job { id: number }

export async function work(clock: Clock): Promise<QueueStats> {
  const [tx, rx]: [Producer<Job>, Consumer<Job>] = await new Builder(new MemStore()).codec(json<Job>()).clock(clock).open();
  await tx.push({ id: 1 });
  // @ts-expect-error a Job has no name
  await tx.push({ name: 'x' });
  const item: Reserved<Job> | null = await rx.reserve();
  // @ts-expect-error the id is a number
  if (item) item.value.id satisfies string;
  await item?.ack();
  return rx.stats();
}
export const conformance: ConformanceOptions<MemStore> = { name: 'MemStore', create: () => new MemStore() };
export const register = (test: (name: string, fn: () => Promise<void>) => void): void => runStoreConformance(test, conformance);
export const clock: Clock = new ManualClock();
export const disk = new CrashFileSystem({ seed: new Prng(7).next() });
export const sqlite: SqliteStoreOptions = { driver: 'better-sqlite3' };
export const level: LevelStoreOptions = { maxItemBytes: 1024 };
export const stores = async (): Promise<Store[]> => [await SqliteStore.open('q.db', sqlite), await LevelStore.open('q', level)];
export const closed = (error: unknown): boolean => error instanceof QueueError && error.code === 'ERR_CLOSED';
export const ops = (): Dashboard => dashboard('q', { basePath: '/ops/', allowActions: false } satisfies DashboardOptions);
// @ts-expect-error the handler takes a request and a response
export const misused = (d: Dashboard): void => d.handle('/ops/');
`;

/** All seven entry points: the above, and ./jetstream given the app's own NATS connection. */
const FULL_APP = `import { connect, type NatsConnection } from '@nats-io/transport-node';
import { json } from 'persistent-queue';
import { JetStreamBuilder, forward, type JetStreamConsumer, type JetStreamQueueOptions, type JetStreamReserved } from 'persistent-queue/jetstream';
import type { Job } from './core.js';
export * from './core.js';

export async function shared(): Promise<JetStreamConsumer<Job>> {
  const nc: NatsConnection = await connect({ servers: '127.0.0.1:4222' });
  const options: JetStreamQueueOptions = { stream: 'ORDERS', replicas: 1 };
  const [tx, rx] = await new JetStreamBuilder(nc, options).codec(json<Job>()).open();
  await tx.push({ id: 1 });
  const item: JetStreamReserved<Job> | null = await rx.reserve();
  await item?.ack();
  return rx;
}
export { forward };
`;

const RESOLUTIONS = {
  nodenext: { module: 'nodenext', moduleResolution: 'nodenext' },
  node16: { module: 'node16', moduleResolution: 'node16' },
  bundler: { module: 'esnext', moduleResolution: 'bundler' },
} as const;
type Resolution = keyof typeof RESOLUTIONS;

/** TypeScript 5.0, installed once into node_modules/.cache (the repository's own is the newest). */
function typescript50(): string {
  const cache = join(root, 'node_modules', '.cache');
  const dir = join(cache, 'pq-typescript-5.0.4');
  const tsc = join(dir, 'node_modules', 'typescript', 'bin', 'tsc');
  if (existsSync(tsc)) return tsc;
  mkdirSync(cache, { recursive: true });
  const staging = mkdtempSync(join(cache, 'pq-typescript-'));
  try {
    execFileSync(
      'npm',
      ['install', '--no-audit', '--no-fund', '--prefer-offline', '--no-save', '--no-package-lock', '--prefix', staging, 'typescript@5.0.4'],
      {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    renameSync(staging, dir);
  } catch (error) {
    // Another run may have put its copy there first: either will do.
    if (!existsSync(tsc)) throw error;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return tsc;
}

const newestTypescript = (): string => join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const newestVersion = (JSON.parse(readFileSync(join(root, 'node_modules', 'typescript', 'package.json'), 'utf8')) as { version: string })
  .version;

const COMPILERS: Record<string, () => string> = { 'TypeScript 5.0': typescript50, [`TypeScript ${newestVersion}`]: newestTypescript };

/** The errors tsc reports for `files` in `app`, strict, with the library files checked (skipLibCheck off, its default). */
function compileErrors(tsc: string, app: string, resolution: Resolution, files: string[]): string[] {
  const config = `tsconfig.${resolution}.json`;
  const compilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: false,
    target: 'es2022',
    types: ['node'],
    ...RESOLUTIONS[resolution],
  };
  writeFileSync(join(app, config), JSON.stringify({ compilerOptions, files }));
  const r = spawnSync(process.execPath, [tsc, '-p', config, '--pretty', 'false'], { cwd: app, encoding: 'utf8' });
  const errors = `${r.stdout}${r.stderr}`.split('\n').filter((line) => /error TS\d+/.test(line));
  expect(r.status === 0, `tsc exits 0 exactly when it reports no error:\n${r.stdout}${r.stderr}`).toBe(errors.length === 0);
  return errors;
}

/** An app with no peer installed, compiling every entry point but ./jetstream. */
function coreApp(): string {
  const app = installedApp('bare');
  writeFileSync(join(app, 'core.ts'), CORE_APP);
  return app;
}

/** An app with the Node 20 NATS clients installed, compiling all seven entry points. */
function fullApp(): string {
  const app = installedApp('nats', NATS_FOR_NODE_20);
  writeFileSync(join(app, 'core.ts'), CORE_APP);
  writeFileSync(join(app, 'full.ts'), FULL_APP);
  return app;
}

/** The NATS clients' own declarations write `Uint8Array<ArrayBuffer>`, which needs TypeScript 5.7's lib. */
const inNatsClient = (error: string): boolean => error.startsWith('node_modules/@nats-io/');

for (const [compiler, tsc] of Object.entries(COMPILERS)) {
  // Under one resolution: the entry points it imports resolve to the same declarations under the
  // others, which the app with every entry point compiles under each.
  test(`${compiler}, nodenext: an app with no peer installed compiles against every entry point but ./jetstream, library files checked`, () => {
    expect(compileErrors(tsc(), coreApp(), 'nodenext', ['core.ts'])).toEqual([]);
  });

  for (const resolution of Object.keys(RESOLUTIONS) as Resolution[]) {
    test(`${compiler}, ${resolution}: an app with the NATS clients installed compiles against all seven entry points, library files checked`, () => {
      const errors = compileErrors(tsc(), fullApp(), resolution, ['full.ts']);
      if (compiler === 'TypeScript 5.0') expect(errors.filter((e) => !inNatsClient(e))).toEqual([]);
      else expect(errors).toEqual([]);
    });
  }
}

test('every declaration file in the tarball compiles, the ones no entry point reaches included', () => {
  const app = fullApp();
  const declarations = packCleanTree().files.filter((f) => f.endsWith('.d.ts'));
  expect(declarations).toContain('dist/lib/clock.d.ts');
  expect(
    compileErrors(
      newestTypescript(),
      app,
      'nodenext',
      declarations.map((f) => `node_modules/persistent-queue/${f}`),
    ),
  ).toEqual([]);
});

test('the compile fails when a published declaration names a type the tarball does not hold (the checks above can fail)', () => {
  const app = join(packCleanTree().work, 'planted');
  cpSync(coreApp(), app, { recursive: true, verbatimSymlinks: true });
  // Take TimeSource out of clock.d.ts, as stripInternal would if it were marked internal: the
  // declarations of the leases and timers name it.
  const file = join(app, 'node_modules', 'persistent-queue', 'dist', 'lib', 'clock.d.ts');
  const text = readFileSync(file, 'utf8');
  const stripped = text.replace(/\/\*\*(?:(?!\*\/)[\s\S])*\*\/\nexport interface TimeSource \{[\s\S]*?\n\}\n/, '');
  expect(stripped).not.toBe(text);
  writeFileSync(file, stripped);
  for (const [compiler, tsc] of Object.entries(COMPILERS)) {
    const errors = compileErrors(tsc(), app, 'nodenext', ['core.ts']);
    expect(
      errors.some((e) => e.includes('persistent-queue/dist/core/') && e.includes("'TimeSource'")),
      `${compiler}:\n${errors.join('\n')}`,
    ).toBe(true);
  }
});
