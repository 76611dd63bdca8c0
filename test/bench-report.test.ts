/**
 * The benchmark report (`npm run bench` writes it; the run itself is too long for the test suite):
 * every target of the brief is computed from the committed results file, the met / missed logic
 * follows the ratios, and BENCHMARKS.md and the charts render from it.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from './support/child-process.js';

interface Target {
  key: string;
  ratio?: number;
  goal: number;
  met: boolean | null;
  reference?: boolean;
  lowerIsBetter?: boolean;
}
interface Output {
  results: { id?: string; kind: string; value: number; samples: number[]; min?: number; max?: number }[];
  targets?: Target[];
}

const loadResults = (): Output => JSON.parse(readFileSync(join(root, 'bench', 'results', 'latest.json'), 'utf8')) as Output;
const targetsModule = async () =>
  (await import(join(root, 'bench', 'lib', 'targets.mjs'))) as { computeTargets: (o: Output) => Target[] };

const TARGET_KEYS = [
  'memstore-vs-bare-p1',
  'memstore-vs-bare-p4',
  'memstore-vs-bare-p64',
  'none-e2e-abs',
  'none-vs-raw',
  'group-vs-raw64',
  'group-vs-sync',
  'sync-vs-raw1',
  'vs-sqlite-1',
  'vs-sqlite-64',
  'vs-sqlite-e2e',
  'vs-level-64',
  'open-clean',
  'open-kill',
  'open-memory',
  'disk-after-ack',
];

describe('benchmark report', () => {
  it('computesEveryTargetOfTheBriefWithAStatusThatFollowsTheRatio', async () => {
    const { computeTargets } = await targetsModule();
    const targets = computeTargets(loadResults());
    const keys = targets.map((t) => t.key);
    for (const key of TARGET_KEYS) expect(keys, key).toContain(key);
    for (const t of targets) {
      if (t.reference) {
        expect(t.met, t.key).toBeNull();
        continue;
      }
      expect(Number.isFinite(t.ratio), t.key).toBe(true);
      expect(t.met, t.key).toBe(t.lowerIsBetter ? t.ratio! <= t.goal : t.ratio! >= t.goal);
    }
  });

  it('anABRatioBelowItsGoalIsReportedMissed', async () => {
    const { computeTargets } = await targetsModule();
    const output = loadResults();
    const ratio = output.results.find((r) => r.id === 'ab/group64/ratio/logstore/level')!;
    ratio.value = 1.5;
    expect(computeTargets(output).find((t) => t.key === 'vs-level-64')!.met).toBe(false);
    ratio.value = 3.5;
    expect(computeTargets(output).find((t) => t.key === 'vs-level-64')!.met).toBe(true);
  });

  it('rendersBenchmarksMdAndTheChartsFromTheResults', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pq-report-'));
    try {
      const { writeReport } = (await import(join(root, 'bench', 'report.mjs'))) as {
        writeReport: (o: Output, where: { outFile: string; chartsDir: string }) => Promise<string[]>;
      };
      await writeReport(loadResults(), { outFile: join(dir, 'BENCHMARKS.md'), chartsDir: join(dir, 'charts') });
      const md = readFileSync(join(dir, 'BENCHMARKS.md'), 'utf8');
      for (const heading of ['## Targets', '## Interleaved A/B rounds', '## Peers, driven directly', '## Where the time goes']) {
        expect(md).toContain(heading);
      }
      const charts = readdirSync(join(dir, 'charts')).filter((f) => f.endsWith('.svg'));
      expect(charts.length).toBeGreaterThanOrEqual(4);
      for (const f of charts) expect(readFileSync(join(dir, 'charts', f), 'utf8')).toMatch(/^<svg/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
