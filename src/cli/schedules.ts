/** `pq schedules`: the schedules a store keeps, with when each fires next. */
import { LogStore, describeSchedules } from '../index.js';
import { type Command, emit, oneDir } from './commands.js';
import { dim, isoTime, quoted } from './text.js';

export const schedules: Command = async (cli, { positionals }) => {
  const dir = oneDir('schedules', positionals);
  // Read-only: no lock, no write, so a store another process has open can be listed too.
  const store = await LogStore.open(dir, { readOnly: true });
  let listed;
  try {
    listed = await describeSchedules(store.inspect().schedules, Date.now());
  } finally {
    await store.close();
  }
  const now = Date.now();
  for (const s of listed) {
    const when = s.nextAt === null ? null : isoTime(s.nextAt);
    if (cli.json) {
      await emit(
        cli.out,
        JSON.stringify({ ...s, firedThrough: isoTime(s.firedThrough), nextAt: when, due: s.nextAt !== null && s.nextAt <= now }),
      );
      continue;
    }
    const spec = s.everyMs !== undefined ? `every ${s.everyMs} ms` : `cron ${quoted(s.cron!)} ${s.tz}`;
    const next =
      when === null
        ? dim(`not fired here: ${s.problem ?? ''}`)
        : `${when}${s.nextAt! <= now ? dim(' (passed: fires at the next open)') : ''}`;
    await emit(cli.out, `${quoted(s.name)}  ${spec}  catch-up ${s.catchUp}  next ${next}`);
  }
  return 0;
};
