/** `pq salvage`: copy what is intact in a store, damaged or not, into a new one. */
import { salvageStore, type SalvageResult } from '../index.js';
import { type Command, requireStore } from './commands.js';
import { UsageError } from './args.js';
import { Progress } from './output.js';
import { bytesText, damageText, dim, fmt, green, progressBar, red, seqRangesText } from './text.js';

/** Runs of the seq map shown without --json. */
const SHOWN_RUNS = 8;

export const salvage: Command = async (cli, { positionals }) => {
  if (positionals.length !== 2) throw new UsageError(`pq salvage takes <src> and <dst>, got ${positionals.length} argument(s)`, 'salvage');
  const [src, dst] = positionals as [string, string];
  requireStore(src);
  const progress = new Progress(cli.err, !cli.json);
  let result: SalvageResult;
  try {
    result = await salvageStore(src, dst, {
      onProgress: progress.enabled ? (done, total) => progress.update(progressBar('salvaging', done, total), done === total) : undefined,
    });
  } catch (error) {
    // The library's argument errors (a destination inside the source) are usage mistakes here.
    if (error instanceof RangeError || error instanceof TypeError) throw new UsageError(error.message, 'salvage');
    throw error;
  } finally {
    progress.done();
  }
  const out = cli.out;
  if (cli.json) {
    out.line(JSON.stringify(result, null, 2));
    return 0;
  }
  out.line(
    `copied ${fmt(result.copied)} item(s), ${bytesText(result.copiedBytes)}, into ${result.dst}; ${fmt(result.acked)} acked record(s) left out`,
  );
  for (const d of result.damaged) {
    if (!out.line(red(d.reason))) await out.ready();
    out.line(`  ${damageText(d)}`);
  }
  out.line(
    result.lost.count === 0 ? green('lost nothing') : red(`lost ${fmt(result.lost.count)} item(s): ${seqRangesText(result.lost.seqs)}`),
  );
  out.line(seqMapText(result));
  if (result.deadLetters > 0) out.line(`copied ${fmt(result.deadLetters)} dead letter(s), numbered after the items`);
  for (const n of result.notes) if (!out.line(dim(n))) await out.ready();
  return 0;
};

function seqMapText(r: SalvageResult): string {
  const runs = r.seqMap;
  if (runs.length === 0) return 'no item to renumber';
  if (runs.length === 1 && runs[0]!.from === runs[0]!.to) return `seqs unchanged (${span(runs[0]!.from, runs[0]!.count)})`;
  const shown = runs.slice(0, SHOWN_RUNS).map((m) => `${span(m.from, m.count)} -> ${span(m.to, m.count)}`);
  const more = runs.length > SHOWN_RUNS ? `, and ${runs.length - SHOWN_RUNS} more run(s) (--json lists them all)` : '';
  return `seqs renumbered: ${shown.join(', ')}${more}`;
}

function span(first: number, count: number): string {
  return count === 1 ? String(first) : `${first}..${first + count - 1}`;
}
