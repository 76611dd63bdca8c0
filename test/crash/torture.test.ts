/**
 * A short SIGKILL torture run in CI (the long form: `npm run torture -- --kills 500`). Needs
 * `dist/` (`npm run build`, which `npm test` runs first).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const built = existsSync(join(root, 'dist', 'index.js'));

describe('SIGKILL torture', () => {
  it('survives 15 seeded SIGKILLs under sync, group and none', () => {
    expect(built, 'dist/ is missing: run `npm run build` first').toBe(true);
    const seed = process.env.PQ_SEED ?? '0x7047';
    const run = spawnSync(process.execPath, [join(root, 'scripts', 'torture.mjs'), '--kills', '15', '--seed', seed], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    const output = `${run.stdout}\n${run.stderr}`;
    console.log(output.trim().split('\n').slice(-3).join('\n'));
    expect(run.status, output).toBe(0);
    expect(run.stdout).toContain('15 SIGKILLs survived');
  });
});
