/** The examples of docs/guides/testing.md, "Property-test your own crash recovery", run as written (against src/). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { it } from 'vitest';
import { docBlock, root } from '../support/docs.js';

const blocks = [docBlock('ts', 'fs.crashPoints({ zeroTail: true })'), docBlock('ts', 'async function appendEntry(')];

it('theCrashTestingExamplesRunAsWritten', async () => {
  const dir = mkdtempSync(join(root, 'test', 'crash', '.readme-'));
  try {
    for (const [i, block] of blocks.entries()) {
      const file = join(dir, `example-${i}.ts`);
      const source = block
        .replaceAll("from 'persistent-queue/testing'", `from '${join(root, 'src', 'testing', 'index.ts')}'`)
        .replaceAll("from 'persistent-queue'", `from '${join(root, 'src', 'index.ts')}'`);
      writeFileSync(file, `${source}\nexport {};\n`);
      await import(/* @vite-ignore */ pathToFileURL(file).href);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
