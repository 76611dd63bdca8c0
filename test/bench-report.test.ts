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
const targetsModule = async () => (await import(join(root, 'bench', 'lib', 'targets.mjs'))) as { computeTargets: (o: Output) => Target[] };

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
  'limits-sync-raw',
  'limits-sync-sqlite',
  'limits-group-raw',
  'limits-group-sqlite',
  'limits-none64-raw',
  'limits-none1-raw',
  'limits-mem-simple',
  'limits-readme-loop',
  'limits-readme-process',
  'remote-endpoint-group-vs-local-group',
  'remote-endpoint-group-vs-plainjob',
  'remote-endpoint-none-vs-plainjob',
];

/** Whether a heading holds a measured figure: a percentage, a ratio, a rate or a time. */
const carriesAFigure = (heading: string): boolean => /\d\s?(%|×|[kMG]?\/s\b|k\/s|M\/s|ms\b|µs\b|s\b)/.test(heading);

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

  it('benchmarksMdHeadingsNameScenariosAndItsFiguresLiveInTables', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pq-report-'));
    try {
      const { writeReport, targetKeysOf } = (await import(join(root, 'bench', 'report.mjs'))) as {
        writeReport: (o: Output, where: { outFile: string; chartsDir: string }) => Promise<string[]>;
        targetKeysOf: (text: string) => string[];
      };
      const { computeTargets } = await targetsModule();
      const output = loadResults();
      await writeReport(output, { outFile: join(dir, 'BENCHMARKS.md'), chartsDir: join(dir, 'charts') });
      const md = readFileSync(join(dir, 'BENCHMARKS.md'), 'utf8');
      const headings = [...md.matchAll(/^#{1,6} .*$/gm)].map((m) => m[0]);
      expect(headings.length).toBeGreaterThan(20);
      // A heading that carries a figure changes its anchor with every run.
      expect(headings.filter(carriesAFigure)).toEqual([]);
      // Every section of "Where the time goes" opens with the table of its targets, each key a target of a full run.
      const handWritten = readFileSync(join(root, 'bench', 'where-the-time-goes.md'), 'utf8');
      const keys = new Set(computeTargets(output).map((t) => t.key));
      expect(targetKeysOf(handWritten).filter((k) => !keys.has(k))).toEqual([]);
      const sections = md
        .slice(md.indexOf('\n## Where the time goes\n'))
        .split(/\n### /)
        .slice(1);
      expect(sections.length).toBeGreaterThan(5);
      for (const section of sections)
        expect(section, section.split('\n')[0]).toMatch(/^.*\n\n\| what \| measured \| baseline \| ratio \| target \| status \|\n/);
      expect(md).not.toContain('<!-- targets:');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('aHeadingWithAFigureIsCaught', () => {
    expect(carriesAFigure("### The README's consumer code, default options: 61 % (39 %–68 %) of push only")).toBe(true);
    expect(carriesAFigure('### LogStore `none` end to end, per item: 445.9 k/s (64 producers)')).toBe(true);
    expect(carriesAFigure('### `group` vs better-sqlite3: 1.10×, target 1.5×')).toBe(true);
    expect(carriesAFigure('## Open time, memory and disk (LogStore, 128 B items)')).toBe(false);
    expect(carriesAFigure('### `group`, 64 producers, push only, against the raw loops')).toBe(false);
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
