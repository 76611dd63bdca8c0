/**
 * The Store conformance suite. A backend runs it from its own test file in two lines:
 *
 * ```ts
 * import { test } from 'vitest'; // or node:test, or any runner with test(name, fn)
 * import { runStoreConformance } from 'persistent-queue/conformance';
 * runStoreConformance(test, { name: 'MyStore', create: () => MyStore.open(freshDir()), reopen: (s) => MyStore.open(s.dir) });
 * ```
 *
 * Each test makes its own fresh store. Assertions use node:assert, so any runner works. Tests that
 * need a hook that was not given (`reopen`, `crash`) are not registered. A test that needs a
 * capability the store turns out not to declare (`features.reopen`) is reported as skipped through
 * the runner's test context (`context.skip()`, as vitest and node:test offer); with a runner that
 * has none it fails, saying why, rather than passing without testing anything.
 */
export { runStoreConformance, type ConformanceOptions, type TestFunction } from './suite.js';
