/**
 * CI smoke run of the fuzzer registry: each fuzzer for ~3 s through `npm run fuzz` (the long
 * form: `npm run fuzz -- <name> --seconds 600`). The canary must fail, and the runner must report
 * that as expected-fail with exit 0; every other fuzzer must exit 0.
 */
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const seed = process.env.PQ_SEED ?? '0x5eed';

function fuzz(name: string): { status: number | null; output: string } {
  const run = spawnSync('npm', ['run', '--silent', 'fuzz', '--', name, '--seconds', '3', '--seed', seed], {
    cwd: root,
    encoding: 'utf8',
    timeout: 90_000,
  });
  const output = `${run.stdout}\n${run.stderr}`;
  console.log(
    output
      .trim()
      .split('\n')
      .filter((l) => !l.includes(' execs/s, '))
      .join('\n'),
  );
  return { status: run.status, output };
}

describe('fuzz registry smoke', () => {
  for (const name of ['segment-decoder', 'cursor-decoder', 'engine-crash', 'endpoint-decoder']) {
    it(`${name} runs ~3 s without a failure`, () => {
      const { status, output } = fuzz(name);
      expect(status, output).toBe(0);
      expect(output).toMatch(new RegExp(`fuzz ${name}: \\d+ execs in .*: OK`));
    });
  }

  for (const name of ['canary', 'endpoint-canary']) {
    it(`${name} fails, and the runner reports it as expected-fail`, () => {
      const { status, output } = fuzz(name);
      expect(status, output).toBe(0);
      expect(output).toContain('EXPECTED-FAIL');
      expect(output).toContain(`reproduce: npm run fuzz -- ${name} --seed`);
    });
  }

  it('an unknown fuzzer is an error', () => {
    const run = spawnSync('npm', ['run', '--silent', 'fuzz', '--', 'no-such-fuzzer'], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(run.status).not.toBe(0);
  });
});
