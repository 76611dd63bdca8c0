// `out(line)` for a child process whose parent reads what it did from its stdout and may SIGKILL
// it: the line is in the pipe when `out` returns. process.stdout.write (and console.log) is not
// enough there: once the pipe is full (a parent slow to read) Node queues the write inside the
// child, and the kill then loses lines whose operations went ahead; a parent that takes the lines
// as what the child did would check less than it claims, or see a violation that is not there.
// fd 1 stays blocking as long as the child never touches process.stdout; EAGAIN is retried in case
// it was made non-blocking anyway. Used by scripts/torture-child.mjs and the tests' children
// (test/support/child-process.ts, `lineWriterSource`).
import { writeSync } from 'node:fs';

const encoder = new TextEncoder();

export function out(line) {
  const bytes = encoder.encode(`${line}\n`);
  for (let at = 0; at < bytes.length; ) {
    try {
      at += writeSync(1, bytes, at);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}
