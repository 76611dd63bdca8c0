/**
 * Every JavaScript and TypeScript block of README.md and docs/ runs in some test, or is listed here
 * as not runnable, with the reason. A test takes a block with `docBlock(lang, ...needles)`
 * (test/support/docs.ts); this file reads those calls out of the test sources, so a block that no
 * test takes any more (moved, reworded, newly written) fails here instead of going unrun.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { type Block, blocksOf, docBlocks, findBlock, root } from '../support/docs.js';

/** The fence languages of code a reader may run: each such block must be claimed. */
const CODE_LANGS = new Set(['js', 'ts', 'mjs', 'cjs', 'javascript', 'typescript', 'jsx', 'tsx']);

/** Documents whose blocks are not examples, with the reason. */
const NOT_EXAMPLES: readonly { prefix: string; reason: string }[] = [
  {
    prefix: 'docs/reference/api/',
    reason:
      'declarations generated from dist/ by scripts/api-report.mjs, not code to run; test/docs/api-report.test.ts checks that they are current',
  },
];

/** Blocks no test can run, each found as a test would find it, with the reason. None today. */
const NOT_RUNNABLE: readonly { lang: string; needles: readonly string[]; reason: string }[] = [];

interface Claim {
  readonly where: string;
  readonly lang: string;
  readonly needles: string[];
}

/** The value of a JavaScript string literal without interpolation, or null. */
function literal(source: string): string | null {
  const quote = source[0];
  if (quote === '"') return JSON.parse(source) as string;
  if (quote === "'" || quote === '`') {
    if (quote === '`' && source.includes('${')) return null;
    const inner = source.slice(1, -1).replace(/\\(.)/gs, (_, c: string) => (c === quote || c === '\\' ? c : `\\${c}`));
    return JSON.parse(`"${inner.replaceAll('"', '\\"')}"`) as string;
  }
  return null;
}

const STRING = String.raw`'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|` + '`(?:[^`\\\\]|\\\\.)*`';
const CALL = new RegExp(String.raw`\bdocBlock\(\s*'(\w+)'((?:\s*,\s*(?:${STRING}))+)\s*,?\s*\)`, 'g');

/** Every `docBlock(...)` call of `source`, with its needles; throws on a call whose needles are not plain literals. */
function claimsIn(file: string, source: string): Claim[] {
  const claims: Claim[] = [];
  for (const m of source.matchAll(CALL)) {
    const needles = [...m[2]!.matchAll(new RegExp(STRING, 'g'))].map((n) => literal(n[0]));
    const where = `${file}:${source.slice(0, m.index).split('\n').length}`;
    if (needles.some((n) => n === null)) throw new Error(`${where}: docBlock needles must be string literals`);
    claims.push({ where, lang: m[1]!, needles: needles as string[] });
  }
  const calls = source.match(/\bdocBlock\(\s*'/g)?.length ?? 0;
  if (calls !== claims.length)
    throw new Error(`${file}: ${calls - claims.length} docBlock call(s) this check cannot read (needles must be string literals)`);
  return claims;
}

/** The test sources, but this file, whose planted calls are strings. */
function testSources(dir = 'test'): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? testSources(`${dir}/${e.name}`)
      : /\.(ts|mts|mjs)$/.test(e.name) && e.name !== 'code-blocks.test.ts'
        ? [`${dir}/${e.name}`]
        : [],
  );
}

/** The code blocks of `blocks` that no claim takes and no entry excuses, as `file:line`. */
function unclaimed(blocks: readonly Block[], claims: readonly Claim[], excused: typeof NOT_RUNNABLE): string[] {
  const taken = new Set<Block>();
  for (const c of [...claims, ...excused]) taken.add(findBlock(blocks, c.lang, c.needles));
  return blocks.filter((b) => CODE_LANGS.has(b.lang) && !taken.has(b)).map((b) => `${b.file}:${b.line} (\`\`\`${b.lang})`);
}

const examples = (): Block[] => docBlocks().filter((b) => !NOT_EXAMPLES.some((x) => b.file.startsWith(x.prefix)));

it('everyJsAndTsBlockOfReadmeAndDocsIsRunByATestOrListedWithAReason', () => {
  const claims = testSources().flatMap((file) => claimsIn(file, readFileSync(join(root, file), 'utf8')));
  expect(claims.length).toBeGreaterThan(25);
  const blocks = examples();
  expect(blocks.filter((b) => CODE_LANGS.has(b.lang)).length).toBeGreaterThan(25);
  for (const entry of NOT_RUNNABLE) expect(entry.reason.length, JSON.stringify(entry.needles)).toBeGreaterThan(20);
  expect(unclaimed(blocks, claims, NOT_RUNNABLE)).toEqual([]);
});

it('theCheckCatchesABlockNoTestRunsAndAClaimThatFindsNoBlock', () => {
  const doc = [
    '# Doc',
    '',
    '```js',
    "console.log('run');",
    '```',
    '',
    '```ts',
    'const unrun: number = 1;',
    '```',
    '',
    '```sh',
    'npm test',
    '```',
    '',
  ].join('\n');
  const blocks = blocksOf('docs/x.md', doc);
  const claims = claimsIn('test/x.test.ts', `const a = docBlock('js', "console.log('run')");\nconst b = docBlock(\n  'js',\n  'run',\n);`);
  expect(claims.map((c) => c.needles)).toEqual([["console.log('run')"], ['run']]);
  expect(unclaimed(blocks, claims, [])).toEqual(['docs/x.md:7 (```ts)']);
  expect(unclaimed(blocks, claims, [{ lang: 'ts', needles: ['unrun'], reason: 'a planted entry' }])).toEqual([]);
  expect(() => unclaimed(blocks, [{ where: 'x', lang: 'js', needles: ['nowhere'] }], [])).toThrow(/found 0/);
  expect(() => claimsIn('test/y.test.ts', 'docBlock(lang, needle)')).not.toThrow();
  expect(() => claimsIn('test/y.test.ts', "docBlock('js', needle)")).toThrow(/cannot read/);
});
