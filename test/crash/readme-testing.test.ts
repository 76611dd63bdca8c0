/** The README's "Property-test your own crash recovery" examples run as written (against src/). */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const section = readme.slice(readme.indexOf('## Property-test your own crash recovery'), readme.indexOf('## Errors'));
const blocks = [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);

it('theCrashTestingExamplesRunAsWritten', async () => {
  expect(blocks.length).toBe(2);
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
