// The processed-set API's types (test/types/processed-set/processed-set.ts): items are typed by the
// queue, and the handler of a SQLite set must be synchronous. The check runs tsc; to show it can
// fail, a copy with one `@ts-expect-error` taken out must fail to compile.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const tsc = join(root, 'node_modules', '.bin', 'tsc');
const types = join(root, 'test', 'types', 'processed-set');

function compile(project: string): { status: number | null; output: string } {
  const r = spawnSync(tsc, ['-p', project], { cwd: root, encoding: 'utf8' });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

it('theProcessedSetTypesCompileAndEveryExpectedErrorIsAnError', () => {
  const r = compile(types);
  expect(r.output).toBe('');
  expect(r.status).toBe(0);
});

it('anAsyncHandlerForASqliteSetWithoutItsExpectedErrorMarkFailsToCompile', () => {
  const dir = mkdtempSync(join(types, 'tmp-'));
  try {
    const source = readFileSync(join(types, 'processed-set.ts'), 'utf8');
    const marked = '  // @ts-expect-error an async handler cannot run inside a better-sqlite3 transaction\n';
    expect(source).toContain(marked);
    writeFileSync(join(dir, 'processed-set.ts'), source.replace(marked, ''));
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        extends: '../../../../tsconfig.json',
        compilerOptions: { noEmit: true, rootDir: '../../../..' },
        include: ['processed-set.ts'],
      }),
    );
    const r = compile(dir);
    expect(r.status).not.toBe(0);
    expect(r.output).toMatch(/processed-set\.ts\(\d+,\d+\): error/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
