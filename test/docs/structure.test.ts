/**
 * The layers of src/ and what each may import, checked on every import of every file: no runtime
 * import cycle anywhere; no type-only cycle but the back edges named below; no import of a layer,
 * a file or a node: module that the layer's row does not allow. Each layer is a folder. CONTRIBUTING.md,
 * "Layers", holds the same table for readers, and a test here keeps the two equal. An exception is
 * one import, named with its reason; one that no longer exists fails too, so the list shrinks as
 * code moves. Also checked: every entry point is an index.ts that only re-exports, and the folders
 * of test/ mirror those of src/.
 *
 * The dashboard page's scripts (src/dashboard/page/js/*.js) are classic browser scripts: they
 * import nothing, and only the .ts files of src/ are read here.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { docText, root } from '../support/docs.js';
import { type Edge, cyclesOf, importGraph, importsOf, sourceFiles } from '../support/import-graph.js';

interface Layer {
  /** As CONTRIBUTING.md's table names it. */
  readonly name: string;
  /** Its files: a folder (`src/core/`), or a file. A file named whole wins over a folder, and a folder over the folders around it. */
  readonly files: readonly string[];
  /** Layers it may import, or single files of other layers (a door a tool goes through). Its own layer is always allowed; `*` allows all. */
  readonly imports: readonly string[];
  /** Layers or files it may take types from (`import type`), and nothing at run time. */
  readonly types?: readonly string[];
  /** Modules outside src/ it must never import; `*` for any. */
  readonly never?: readonly string[];
}

// What the operator tools (pq, the dashboard) reach below the public entry points, each for one
// thing the public API does not offer: who holds a store's lock and how to reach its owner, and the
// spool's backlog counted without opening the store.
const TOOL_DOORS = [
  'src/fs/node-fs.ts', // the node:fs binding the doors below are called with
  'src/stores/log/engine/format.ts', // the store directory's file names (the spool, the endpoint file, classifyEntry)
  'src/stores/log/engine/store-dir.ts', // liveHolder(): the process holding the store's lock
  'src/stores/log/engine/spool-file.ts', // readSpoolBacklog(): what waits in the spool
  'src/remote/client.ts', // EndpointClient: the operator's side of the owner's endpoint
];

/** The layers, bottom up. CONTRIBUTING.md, "Layers", is this table in prose. */
const LAYERS: readonly Layer[] = [
  { name: 'contract', files: ['src/contract/'], imports: [], never: ['*'] },
  { name: 'lib', files: ['src/lib/'], imports: ['contract'] },
  { name: 'api', files: ['src/api/'], imports: ['contract', 'lib'], never: ['*'] },
  { name: 'fs', files: ['src/fs/'], imports: ['contract', 'lib'] },
  { name: 'core', files: ['src/core/'], imports: ['contract', 'lib', 'api'], never: ['*'] },
  { name: 'mem', files: ['src/stores/mem/'], imports: ['contract', 'lib'], never: ['*'] },
  {
    name: 'log-engine',
    files: ['src/stores/log/engine/'],
    imports: ['contract', 'lib', 'fs'],
    never: ['node:fs', 'node:fs/promises', 'node:net', 'node:http'],
  },
  { name: 'log', files: ['src/stores/log/'], imports: ['contract', 'lib', 'fs', 'log-engine', 'endpoint'] },
  { name: 'sqlite', files: ['src/stores/sqlite/'], imports: ['contract', 'lib', 'fs'], types: ['once'] },
  { name: 'level', files: ['src/stores/level/'], imports: ['contract', 'lib', 'fs'] },
  { name: 'once', files: ['src/once/'], imports: ['contract', 'lib', 'fs', 'api', 'core', 'log'] },
  { name: 'endpoint', files: ['src/remote/'], imports: ['contract', 'lib', 'fs', 'log-engine', 'api', 'core'] },
  {
    name: 'jetstream',
    files: ['src/engines/jetstream/'],
    // The option parsing, retry policies, leases and batch checks both queues share; never the
    // embedded queue's state (src/core/queue-core.ts) or its workers.
    imports: [
      'contract',
      'lib',
      'api',
      'src/core/retry.ts',
      'src/core/leases.ts',
      'src/core/deliveries.ts',
      'src/core/dead-letters.ts',
      'src/core/batches.ts',
      'src/core/handles.ts',
    ],
  },
  { name: 'testing', files: ['src/testing/'], imports: ['contract', 'lib', 'fs'] },
  { name: 'conformance', files: ['src/conformance/'], imports: ['contract', 'lib', 'testing', 'src/core/builder.ts'] },
  {
    name: 'dashboard',
    files: ['src/dashboard/'],
    imports: ['contract', 'lib', 'src/index.ts', 'src/stores/log/index.ts', ...TOOL_DOORS],
    types: ['src/remote/timings.ts'],
  },
  { name: 'cli', files: ['src/cli/'], imports: ['contract', 'lib', 'src/index.ts', 'src/dashboard/index.ts', ...TOOL_DOORS] },
  { name: 'entry', files: ['src/index.ts'], imports: ['*'] },
];

/** Type-only imports the table does not allow, kept for a reason each. */
const EXCEPTIONS: readonly { from: string; to: string; why: string }[] = [
  {
    from: 'src/stores/log/engine/spool-producer.ts',
    to: 'src/remote/backend.ts',
    why: "the spool's producer is one of the two backends of connect(), and implements the interface src/remote/ defines for both (types only)",
  },
  {
    from: 'src/contract/owner-surface.ts',
    to: 'src/core/group-report.ts',
    why: "the owner's surface answers GROUPS with the core's report of its groups as it is (types only)",
  },
  {
    from: 'src/contract/owner-surface.ts',
    to: 'src/core/schedules.ts',
    why: "the owner's surface answers SCHEDULES with the core's page of schedules as it is (types only)",
  },
  {
    from: 'src/dashboard/api.ts',
    to: 'src/core/group-report.ts',
    why: "the groups page shows the owner's report of its groups, in the shape the core makes it (types only)",
  },
  {
    from: 'src/dashboard/api.ts',
    to: 'src/core/schedules.ts',
    why: "the schedules page shows the owner's page of schedules, in the shape the core makes it (types only)",
  },
];

/**
 * Type-only imports that close a cycle, each a pair of modules that name each other on purpose. A
 * type cycle costs nothing at run time, but a new one usually means a type in the wrong module:
 * any other fails.
 */
const TYPE_BACK_EDGES: readonly { from: string; to: string; why: string }[] = [
  {
    from: 'src/contract/store.ts',
    to: 'src/contract/owner-surface.ts',
    why: "Store.attach() is handed the owner's surface, whose types name the contract's DeadLetter",
  },
  { from: 'src/core/reserved.ts', to: 'src/core/queue-core.ts', why: 'a reservation settles through the core that made it' },
  { from: 'src/core/entry.ts', to: 'src/core/leases.ts', why: 'an entry holds its current lease, and a lease its entry' },
  {
    from: 'src/engines/jetstream/delayed.ts',
    to: 'src/engines/jetstream/core.ts',
    why: 'the mover of delayed items is handed the core that owns it',
  },
  { from: 'src/engines/jetstream/reserved.ts', to: 'src/engines/jetstream/handles.ts', why: 'an item is handed the consumer that took it' },
  {
    from: 'src/engines/jetstream/process.ts',
    to: 'src/engines/jetstream/handles.ts',
    why: 'the workers of process() are handed the consumer they run for',
  },
  {
    from: 'src/engines/jetstream/stats.ts',
    to: 'src/engines/jetstream/core.ts',
    why: 'the figures are gathered from the core and the consumer they are handed',
  },
  {
    from: 'src/engines/jetstream/stats.ts',
    to: 'src/engines/jetstream/handles.ts',
    why: 'the figures are gathered from the core and the consumer they are handed',
  },
];

/** The source of each entry point of package.json's `exports` (`./dist/x/index.js` is `src/x/index.ts`). */
function entryPoints(): string[] {
  const pkg = JSON.parse(docText('package.json')) as { exports: Record<string, string | { default: string }> };
  return Object.values(pkg.exports)
    .filter((e) => typeof e !== 'string')
    .map((e) => e.default.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts'));
}

function matches(pattern: string, path: string): boolean {
  if (pattern.endsWith('/')) return path.startsWith(pattern);
  if (!pattern.includes('*')) return path === pattern;
  return new RegExp(`^${pattern.replace(/[.]/g, '\\.').replace(/\*/g, '[^/]*')}$`).test(path);
}

/**
 * The layer of a file of src/, or undefined; a file or pattern that names it wins over a folder,
 * and the deepest folder that holds it over the folders around that (`src/stores/log/engine/`
 * over `src/stores/log/`).
 */
function layerOf(path: string): Layer | undefined {
  const whole = LAYERS.filter((l) => l.files.some((p) => !p.endsWith('/') && matches(p, path)));
  if (whole.length > 0) return whole.length === 1 ? whole[0] : undefined;
  const depth = (l: Layer): number =>
    Math.max(-1, ...l.files.filter((p) => p.endsWith('/') && matches(p, path)).map((p) => p.split('/').length));
  const deepest = Math.max(...LAYERS.map(depth));
  const folder = LAYERS.filter((l) => deepest >= 0 && depth(l) === deepest);
  return folder.length === 1 ? folder[0] : undefined;
}

function allows(entries: readonly string[] | undefined, target: string, targetLayer: Layer): boolean {
  return (entries ?? []).some((e) => e === '*' || e === targetLayer.name || e === target);
}

/** Everything wrong with `edges` over `files`, one line each; empty when the rules hold. */
function problems(files: readonly string[], edges: readonly Edge[]): string[] {
  const found: string[] = [];
  const known = new Set(files);
  for (const file of files) if (layerOf(file) === undefined) found.push(`${file} is in no layer, or in two: give it one row`);
  for (const edge of edges) {
    const from = layerOf(edge.from);
    if (from === undefined) continue;
    const kind = edge.runtime ? 'imports' : 'imports types from';
    if (!edge.to.startsWith('src/')) {
      const never = from.never ?? [];
      if (!edge.to.startsWith('.') && never.some((n) => n === '*' || n === edge.to))
        found.push(
          `${edge.from} ${kind} ${edge.to}: ${from.name} imports ${never.includes('*') ? 'nothing outside src/' : `none of ${never.join(', ')}`}`,
        );
      continue;
    }
    if (!known.has(edge.to)) {
      found.push(`${edge.from} ${kind} ${edge.to}, which is not a file of src/`);
      continue;
    }
    const to = layerOf(edge.to);
    if (to === undefined || to === from) continue;
    if (allows(from.imports, edge.to, to)) continue;
    if (!edge.runtime && allows(from.types, edge.to, to)) continue;
    if (!edge.runtime && EXCEPTIONS.some((e) => e.from === edge.from && e.to === edge.to)) continue;
    found.push(
      `${edge.from} ${kind} ${edge.to}: ${from.name} may not import ${to.name}${allows(from.types, edge.to, to) ? ' at run time' : ''}`,
    );
  }
  for (const cycle of cyclesOf(edges.filter((e) => e.runtime))) found.push(`runtime import cycle: ${cycle.join(' -> ')}`);
  // With the named back edges left out, every remaining cycle is one; those made of runtime
  // imports only are the ones reported just above.
  const backEdge = (e: Edge): boolean => !e.runtime && TYPE_BACK_EDGES.some((b) => b.from === e.from && b.to === e.to);
  const runtimeStep = (from: string, to: string): boolean => edges.some((e) => e.from === from && e.to === to && e.runtime);
  for (const cycle of cyclesOf(edges.filter((e) => !backEdge(e)))) {
    if (cycle.every((to, i) => i === 0 || runtimeStep(cycle[i - 1]!, to))) continue;
    found.push(`type import cycle: ${cycle.join(' -> ')} (name its back edge with a reason in TYPE_BACK_EDGES, or move the type)`);
  }
  return found;
}

/** Listed exceptions and back edges that no longer match an import as written. */
function staleListings(edges: readonly Edge[]): string[] {
  const typeEdge = (from: string, to: string): boolean => edges.some((e) => e.from === from && e.to === to && !e.runtime);
  return [...EXCEPTIONS, ...TYPE_BACK_EDGES]
    .filter((x) => !typeEdge(x.from, x.to))
    .map((x) => `${x.from} -> ${x.to} is listed but no longer a type-only import`);
}

const files = sourceFiles(root, 'src');
const edges = importGraph(root, 'src');

it('everyFileOfSrcIsInOneLayerAndImportsOnlyWhatItsLayerMay', () => {
  expect(files.length).toBeGreaterThan(150);
  expect(edges.filter((e) => e.to.startsWith('src/')).length).toBeGreaterThan(500);
  expect(problems(files, edges)).toEqual([]);
});

it('srcHasNoRuntimeImportCycleAndNoTypeCycleButTheNamedBackEdges', () => {
  expect(cyclesOf(edges.filter((e) => e.runtime))).toEqual([]);
  expect(staleListings(edges)).toEqual([]);
});

/** Whether a module's text holds nothing but comments and `export … from` statements. */
function onlyReExports(text: string): boolean {
  const rest = text
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '')
    .replace(/^export\s+(?:type\s+)?(?:\*(?:\s+as\s+[\w$]+)?|\{[^}]*\})\s*from\s*'[^']+';$/gm, '');
  return rest.trim() === '';
}

// What an entry point offers is decided in the files it re-exports from: every entry point of the
// package is an index.ts, and every index.ts of src/ (an entry point, or a folder's public face)
// holds nothing but re-exports.
it('theEntryPointsOnlyReExport', () => {
  const entries = entryPoints();
  expect(entries).toEqual(
    expect.arrayContaining(['src/index.ts', 'src/conformance/index.ts', 'src/stores/sqlite/index.ts', 'src/engines/jetstream/index.ts']),
  );
  expect(entries.filter((file) => !file.endsWith('/index.ts') || !files.includes(file))).toEqual([]);
  const indexes = files.filter((file) => file.endsWith('/index.ts'));
  expect(indexes.length).toBeGreaterThan(entries.length);
  for (const file of new Set([...entries, ...indexes])) expect(onlyReExports(docText(file)), file).toBe(true);
  expect(onlyReExports("export { a } from './a.js';\nexport type {\n  B,\n} from './b.js';\n")).toBe(true);
  expect(onlyReExports("export { a } from './a.js';\nexport const b = a + 1;\n")).toBe(false);
  expect(onlyReExports("import { a } from './a.js';\nexport { a };\n")).toBe(false);
});

/** CONTRIBUTING.md's "Layers" table: layer name, files, may import (`types only:` before the type-only ones). */
function contributingLayers(): { name: string; files: string[]; imports: string[]; types: string[] }[] {
  const text = docText('CONTRIBUTING.md');
  const start = text.indexOf('\n## Layers\n');
  expect(start, 'CONTRIBUTING.md has "## Layers"').toBeGreaterThan(0);
  const section = text.slice(start + 1, text.indexOf('\n## ', start + 1));
  const ticks = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  return section
    .split('\n')
    .filter((line) => /^\| `/.test(line))
    .map((line) => {
      const [name, filesCell, importCell] = line
        .split('|')
        .slice(1, 4)
        .map((c) => c.trim());
      const [imports, types = ''] = importCell!.split('types only:');
      return { name: ticks(name!)[0]!, files: ticks(filesCell!), imports: ticks(imports!), types: ticks(types) };
    });
}

it('contributingsLayersTableIsTheTableThisTestChecks', () => {
  const sorted = (list: readonly string[] = []): string[] => [...list].sort();
  const documented = contributingLayers().map((l) => ({ ...l, imports: sorted(l.imports), types: sorted(l.types) }));
  expect(documented).toEqual(
    LAYERS.map((l) => ({ name: l.name, files: [...l.files], imports: sorted(l.imports), types: sorted(l.types) })),
  );
});

it('contributingNamesEveryExceptionAndTypeBackEdge', () => {
  const text = docText('CONTRIBUTING.md');
  const section = text.slice(text.indexOf('\n## Layers\n')).replace(/\s+/g, ' ');
  for (const x of [...EXCEPTIONS, ...TYPE_BACK_EDGES]) expect(section, `${x.from} -> ${x.to}`).toContain(`\`${x.from}\` → \`${x.to}\``);
});

// The checks above can fail: each planted import below breaks one rule and is caught.

/** The real graph with one more import of `from`, written as the code would write it. */
function planted(from: string, line: string): Edge[] {
  return [...edges, ...importsOf(from, line)];
}

it('aPlantedRuntimeCycleIsReportedWithItsPath', () => {
  const found = problems(files, planted('src/core/run-context.ts', "import { batchWorker } from './batches.js';"));
  expect(found).toContain('runtime import cycle: src/core/batches.ts -> src/core/run-context.ts -> src/core/batches.ts');
  const three = [
    ...importsOf('src/a.ts', "import { b } from './b.js';"),
    ...importsOf('src/b.ts', "export { c } from './c.js';"),
    ...importsOf('src/c.ts', "import {\n  type A,\n  a,\n} from './a.js';"),
  ];
  expect(cyclesOf(three)).toEqual([['src/a.ts', 'src/b.ts', 'src/c.ts', 'src/a.ts']]);
});

it('aPlantedTypeCycleFailsUnlessItsBackEdgeIsNamed', () => {
  const found = problems(files, planted('src/core/run-context.ts', "import type { Workers } from './batches.js';"));
  expect(found).toContain(
    'type import cycle: src/core/batches.ts -> src/core/run-context.ts -> src/core/batches.ts (name its back edge with a reason in TYPE_BACK_EDGES, or move the type)',
  );
  expect(cyclesOf(importsOf('src/a.ts', "import type { A } from './a.js';"))).toEqual([['src/a.ts', 'src/a.ts']]);
});

it('aPlantedImportAcrossTheLayersIsCaught', () => {
  const cases: [from: string, line: string, problem: string][] = [
    [
      'src/fs/node-fs.ts',
      "import { LogEngine } from '../stores/log/engine/log-engine.js';",
      'src/fs/node-fs.ts imports src/stores/log/engine/log-engine.ts: fs may not import log-engine',
    ],
    [
      'src/fs/pid-lock.ts',
      "import type { QueueCore } from '../core/queue-core.js';",
      'src/fs/pid-lock.ts imports types from src/core/queue-core.ts: fs may not import core',
    ],
    [
      'src/stores/log/engine/reader.ts',
      "import { QueueCore } from '../../../core/queue-core.js';",
      'src/stores/log/engine/reader.ts imports src/core/queue-core.ts: log-engine may not import core',
    ],
    [
      'src/stores/log/engine/reader.ts',
      "import { run } from '../../../cli/main.js';",
      'src/stores/log/engine/reader.ts imports src/cli/main.ts: log-engine may not import cli',
    ],
    [
      'src/stores/log/engine/reader.ts',
      "import { readFileSync } from 'node:fs';",
      'src/stores/log/engine/reader.ts imports node:fs: log-engine imports none of node:fs, node:fs/promises, node:net, node:http',
    ],
    [
      'src/stores/log/engine/verify.ts',
      "import { LogStore } from '../log-store.js';",
      'src/stores/log/engine/verify.ts imports src/stores/log/log-store.ts: log-engine may not import log',
    ],
    [
      'src/stores/log/engine/spool-producer.ts',
      "import { EndpointServer } from '../../../remote/server.js';",
      'src/stores/log/engine/spool-producer.ts imports src/remote/server.ts: log-engine may not import endpoint',
    ],
    [
      'src/stores/mem/mem-store.ts',
      "import { LogStore } from '../log/index.js';",
      'src/stores/mem/mem-store.ts imports src/stores/log/index.ts: mem may not import log',
    ],
    [
      'src/stores/mem/mem-store.ts',
      "import { QueueCore } from '../../core/queue-core.js';",
      'src/stores/mem/mem-store.ts imports src/core/queue-core.ts: mem may not import core',
    ],
    [
      'src/stores/sqlite/sqlite-store.ts',
      "import { Builder } from '../../core/builder.js';",
      'src/stores/sqlite/sqlite-store.ts imports src/core/builder.ts: sqlite may not import core',
    ],
    [
      'src/core/queue-core.ts',
      "import { Segment } from '../stores/log/engine/segment.js';",
      'src/core/queue-core.ts imports src/stores/log/engine/segment.ts: core may not import log-engine',
    ],
    [
      'src/core/queue-core.ts',
      "import { MemStore } from '../stores/mem/index.js';",
      'src/core/queue-core.ts imports src/stores/mem/index.ts: core may not import mem',
    ],
    [
      'src/core/queue-core.ts',
      "import { nodeFileSystem } from '../fs/node-fs.js';",
      'src/core/queue-core.ts imports src/fs/node-fs.ts: core may not import fs',
    ],
    [
      'src/core/queue-core.ts',
      "import { dashboard } from '../dashboard/index.js';",
      'src/core/queue-core.ts imports src/dashboard/index.ts: core may not import dashboard',
    ],
    [
      'src/core/queue-core.ts',
      "import { JetStreamCore } from '../engines/jetstream/core.js';",
      'src/core/queue-core.ts imports src/engines/jetstream/core.ts: core may not import jetstream',
    ],
    [
      'src/core/queue-core.ts',
      "import { setTimeout } from 'node:timers';",
      'src/core/queue-core.ts imports node:timers: core imports nothing outside src/',
    ],
    [
      'src/engines/jetstream/forward.ts',
      "import { QueueCore } from '../../core/queue-core.js';",
      'src/engines/jetstream/forward.ts imports src/core/queue-core.ts: jetstream may not import core',
    ],
    [
      'src/cli/stats.ts',
      "import { Cursor } from '../stores/log/engine/cursor.js';",
      'src/cli/stats.ts imports src/stores/log/engine/cursor.ts: cli may not import log-engine',
    ],
    [
      'src/dashboard/api.ts',
      "import { Timings } from '../remote/timings.js';",
      'src/dashboard/api.ts imports src/remote/timings.ts: dashboard may not import endpoint at run time',
    ],
    [
      'src/stores/sqlite/schema.ts',
      "import { effectivelyOnce } from '../../once/processed-set.js';",
      'src/stores/sqlite/schema.ts imports src/once/processed-set.ts: sqlite may not import once at run time',
    ],
    [
      'src/stores/level/format.ts',
      "import { SqliteStore } from '../sqlite/index.js';",
      'src/stores/level/format.ts imports src/stores/sqlite/index.ts: level may not import sqlite',
    ],
    [
      'src/core/queue-core.ts',
      "import { gone } from './gone.js';",
      'src/core/queue-core.ts imports src/core/gone.ts, which is not a file of src/',
    ],
  ];
  // An import upward may close a cycle too (the engine importing the CLI does); that is reported apart.
  const acrossLayers = (found: string[]): string[] => found.filter((p) => !/^(runtime|type) import cycle/.test(p));
  for (const [from, line, problem] of cases) expect(acrossLayers(problems(files, planted(from, line))), line).toEqual([problem]);
  // Allowed: a tool through its door, a type from a types-only layer, a store's own folder, and the
  // log store's face over its engine.
  for (const [from, line] of [
    ['src/cli/stats.ts', "import { liveHolder } from '../stores/log/engine/store-dir.js';"],
    ['src/dashboard/api.ts', "import type { TimingBucket } from '../remote/timings.js';"],
    ['src/stores/sqlite/sqlite-store.ts', "import { loadDriver } from './driver.js';"],
    ['src/stores/log/log-store.ts', "import { Layout } from './engine/layout.js';"],
  ] as const) {
    expect(problems(files, planted(from, line)), line).toEqual([]);
  }
});

it('aFileInNoLayerIsCaught', () => {
  expect(problems([...files, 'src/stray.ts'], edges)).toEqual(['src/stray.ts is in no layer, or in two: give it one row']);
});

// The tests mirror the source: the tests of a claim sit in the folder of test/ named as the folder
// of src/ that holds its code (test/stores/log/ for src/stores/log/), but for the suites that cross
// the layers.

/** Folders of test/ that mirror no folder of src/: the crash models, the documents, the shared helpers and the type fixtures. */
const CROSS_CUTTING_TESTS = ['test/crash', 'test/docs', 'test/support', 'test/types'];

/** Every folder under `dir` (a path from the root), but the data of `fixtures/` folders. */
function foldersUnder(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true })
    .filter((e) => e.isDirectory() && e.name !== 'fixtures' && !e.name.startsWith('.'))
    .flatMap((e) => [`${dir}/${e.name}`, ...foldersUnder(`${dir}/${e.name}`)]);
}

/** The folders of `folders` (under test/) that are neither cross-cutting nor named as a folder of `srcFolders`. */
function unmirrored(folders: readonly string[], srcFolders: ReadonlySet<string>): string[] {
  const crossCutting = (f: string): boolean => CROSS_CUTTING_TESTS.some((c) => f === c || f.startsWith(`${c}/`));
  return folders.filter((f) => !crossCutting(f) && !srcFolders.has(`src${f.slice('test'.length)}`));
}

it('everyFolderOfTestIsAFolderOfSrcOrCrossesTheLayers', () => {
  const srcFolders = new Set(foldersUnder('src'));
  const folders = foldersUnder('test');
  expect(folders).toEqual(expect.arrayContaining(['test/core', 'test/stores/log', 'test/engines/jetstream']));
  expect(unmirrored(folders, srcFolders)).toEqual([]);
  // The check can fail: a folder of test/ that names no folder of src/ is reported.
  expect(unmirrored([...folders, 'test/log', 'test/docs/more'], srcFolders)).toEqual(['test/log']);
});
