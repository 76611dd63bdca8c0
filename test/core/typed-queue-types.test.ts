// The typed queue API's types (test/types/typed-queue.ts): the generics flow from the codec to
// push, reserve, process and for-await, and misuse fails to compile. The check runs tsc; to show
// it can fail, a copy with one `@ts-expect-error` taken out must fail to compile.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const tsc = join(root, 'node_modules', '.bin', 'tsc');

function compile(project: string): { status: number | null; output: string } {
  const r = spawnSync(tsc, ['-p', project], { cwd: root, encoding: 'utf8' });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

it('theTypedQueueTypesCompileAndEveryExpectedErrorIsAnError', () => {
  const r = compile(join(root, 'test', 'types'));
  expect(r.output).toBe('');
  expect(r.status).toBe(0);
});

it('aMisuseWithoutItsExpectedErrorMarkFailsToCompile', () => {
  const dir = mkdtempSync(join(root, 'test', 'types', 'tmp-'));
  try {
    const source = readFileSync(join(root, 'test', 'types', 'typed-queue.ts'), 'utf8');
    const marked = '  // @ts-expect-error a missing field\n';
    expect(source).toContain(marked);
    writeFileSync(join(dir, 'typed-queue.ts'), source.replace(marked, ''));
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        extends: '../../../tsconfig.json',
        compilerOptions: { noEmit: true, rootDir: '../../..' },
        include: ['typed-queue.ts'],
      }),
    );
    const r = compile(dir);
    expect(r.status).not.toBe(0);
    expect(r.output).toMatch(/Property 'sku' is missing/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
