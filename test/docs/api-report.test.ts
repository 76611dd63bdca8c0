/**
 * The API reports under docs/reference/api/ are the ones the built declarations make
 * (scripts/api-report.mjs), so a change of the public surface shows in review as a change of
 * those files. Needs `dist/` (`npm test` builds it). A planted change of the declarations (an
 * export added, a member's signature changed) must change exactly the reports of the entry points
 * that reach it.
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from '../support/docs.js';

interface ReportModule {
  apiReports(root: string): Map<string, string>;
  staleReports(root: string, reports: Map<string, string>): string[];
  statementsOf(source: string): { text: string; doc: string | null }[];
  REPORT_DIR: string;
}
const load = async (): Promise<ReportModule> => (await import(join(root, 'scripts', 'api-report.mjs'))) as ReportModule;

/** A copy of package.json and the declarations of dist/, where a test may change them. */
function copyOfDeclarations(): string {
  const dir = mkdtempSync(join(tmpdir(), 'pq-api-'));
  cpSync(join(root, 'package.json'), join(dir, 'package.json'));
  cpSync(join(root, 'dist'), join(dir, 'dist'), { recursive: true, filter: (src) => !/\.(js|map)$/.test(src) });
  return dir;
}

describe('API reports', () => {
  it('theCheckedInReportsAreTheOnesTheBuiltDeclarationsMake', async () => {
    const { apiReports, staleReports, REPORT_DIR } = await load();
    const reports = apiReports(root);
    expect([...reports.keys()].sort()).toEqual([
      'conformance.api.md',
      'dashboard.api.md',
      'index.api.md',
      'jetstream.api.md',
      'level.api.md',
      'sqlite.api.md',
      'testing.api.md',
    ]);
    expect(readdirSync(join(root, REPORT_DIR)).sort()).toEqual([...reports.keys()].sort());
    expect(staleReports(root, reports), 'run npm run build && npm run api-report, and review the change').toEqual([]);
  });

  it('everyExportOfAnEntryPointHasItsDeclarationInTheReport', async () => {
    const { apiReports } = await load();
    const index = apiReports(root).get('index.api.md')!;
    for (const name of ['Builder', 'LogStore', 'QueueErrorCode', 'connect', 'channels']) expect(index).toContain(`### \`${name}\`\n`);
    expect(index).toMatch(
      /### `Reserved`\n\nDeclared in `dist\/core\/reserved\.d\.ts`\.\n\n```ts\n[\s\S]*?export declare class Reserved<T = Uint8Array> implements QueueItem<T> \{\n[\s\S]*?\n {4}ack\(\): Promise<void>;\n/,
    );
    // What LogStore inherits from the engine is part of the surface, though the engine is not exported.
    expect(index).toContain('### `LogEngine` in `dist/stores/log/engine/log-engine.d.ts`');
    expect(apiReports(root).get('jetstream.api.md')).toMatch(/- `@nats-io\/transport-node`: `NatsConnection`/);
  });

  it('aPlantedChangeOfTheDeclarationsChangesTheReportsOfTheEntryPointsThatReachIt', async () => {
    const { apiReports, staleReports } = await load();
    const dir = copyOfDeclarations();
    try {
      expect(staleReports(root, apiReports(dir)), 'the copy makes the same reports').toEqual([]);
      const testing = join(dir, 'dist', 'testing', 'index.d.ts');
      writeFileSync(testing, `${readFileSync(testing, 'utf8')}export declare function planted(): void;\n`);
      expect(staleReports(root, apiReports(dir))).toEqual(['testing.api.md']);
      const reserved = join(dir, 'dist', 'core', 'reserved.d.ts');
      writeFileSync(
        reserved,
        readFileSync(reserved, 'utf8').replace('    ack(): Promise<void>;', '    ack(force?: boolean): Promise<void>;'),
      );
      // Reserved is exported by `.` and named by the JetStream queue's declarations.
      expect(staleReports(root, apiReports(dir))).toEqual(['index.api.md', 'jetstream.api.md', 'testing.api.md']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('theScannerSplitsStatementsPastCommentsStringsTemplatesAndGenerics', async () => {
    const { statementsOf } = await load();
    // A template literal type, as a declaration file writes one: `${...}` is meant.
    const templateType = 'export type B = `$' + "{string};{` | 'x;}' | ((a: A) => Promise<Map<string, A>>);";
    const source = [
      "import type { A } from './a.js';",
      '/** The doc of B; with a semicolon. */',
      templateType,
      '// a line comment',
      'export declare class C<T extends { a: 1 }> {',
      '    #private;',
      '    /** member doc */',
      '    m(x: (y: T) => void): Record<string, { k: "}" }>;',
      '}',
      "export { C as D } from './c.js';",
    ].join('\n');
    const statements = statementsOf(source);
    expect(statements.map((s) => s.text)).toEqual([
      "import type { A } from './a.js';",
      templateType,
      'export declare class C<T extends { a: 1 }> {\n    #private;\n    m(x: (y: T) => void): Record<string, { k: "}" }>;\n}',
      "export { C as D } from './c.js';",
    ]);
    expect(statements.map((s) => s.doc)).toEqual([null, '/** The doc of B; with a semicolon. */', null, null]);
  });
});
