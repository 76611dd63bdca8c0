/**
 * Every code a QueueError can carry has one heading in the reference of error codes
 * (docs/reference/errors.md), and every such heading names a code (src/contract/errors.ts says so; this
 * keeps it so). A planted mismatch (a code without a heading) is caught: the check compares the
 * two sets both ways.
 */
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);
const reference = readFileSync(new URL('docs/reference/errors.md', root), 'utf8');
const errors = readFileSync(new URL('src/contract/errors.ts', root), 'utf8');

/** The members of `export type QueueErrorCode = | 'ERR_A' | 'ERR_B' ...;`. */
function codesOf(source: string): string[] {
  const union = /export type QueueErrorCode =([^;]*);/.exec(source)?.[1] ?? '';
  return [...union.matchAll(/'(ERR_[A-Z_]+)'/g)].map((m) => m[1]!).sort();
}

function headingsOf(doc: string): string[] {
  return [...doc.matchAll(/^## `(ERR_[A-Z_]+)`$/gm)].map((m) => m[1]!).sort();
}

it('everyQueueErrorCodeHasOneReferenceHeadingAndEveryHeadingIsACode', () => {
  const codes = codesOf(errors);
  expect(codes.length).toBeGreaterThan(10);
  const headings = headingsOf(reference);
  expect(new Set(headings).size, 'a heading twice').toBe(headings.length);
  expect(headings).toEqual(codes);
});

it('theCheckCatchesACodeWithoutAHeading', () => {
  const planted = errors.replace("  | 'ERR_OWNER_GONE'", "  | 'ERR_OWNER_GONE'\n  | 'ERR_PLANTED'");
  expect(codesOf(planted)).toContain('ERR_PLANTED');
  expect(headingsOf(reference)).not.toEqual(codesOf(planted));
});
