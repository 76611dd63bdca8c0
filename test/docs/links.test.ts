/**
 * The documents hold together: every relative link reaches a file, and a heading of it when it
 * names one; every section a comment or a document cites by title (`README, "Leases"`,
 * `docs/internals/core.md, "Lazy acks"`, `docs/guides/processing.md, "Leases"`) is a heading of
 * that document. DESIGN.md is only a map of docs/internals/ now: a citation of one of its old
 * sections names no heading of it, and fails.
 * Sections move between files; a citation or a link left behind fails here, not in a reader's hands.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { expect, it } from 'vitest';
import { type Link, allDocFiles, anchorsOf, docFiles, docText, headingsOf, linksOf, root } from '../support/docs.js';

/** What is wrong with `link`, or null: a missing file, or an anchor no heading of the target has. */
function brokenLink(link: Link, read: (file: string) => string | null): string | null {
  if (/^[a-z]+:/i.test(link.target)) return null;
  const [path, anchor] = link.target.split('#', 2) as [string, string | undefined];
  const file = path === '' ? link.file : normalize(join(dirname(link.file), decodeURIComponent(path)));
  const text = read(file);
  if (text === null) return `${link.file}:${link.line}: [${link.text}](${link.target}): no file ${file}`;
  if (anchor === undefined || !file.endsWith('.md')) return null;
  if (!anchorsOf(text).includes(anchor))
    return `${link.file}:${link.line}: [${link.text}](${link.target}): ${file} has no heading #${anchor}`;
  return null;
}

function readIfThere(file: string): string | null {
  const path = join(root, file);
  if (!existsSync(path)) return null;
  return statSync(path).isDirectory() ? '' : readFileSync(path, 'utf8');
}

it('everyRelativeLinkOfTheDocumentsReachesItsFileAndHeading', () => {
  const links = allDocFiles().flatMap((file) => linksOf(file, docText(file)));
  expect(links.length).toBeGreaterThan(150);
  expect(links.map((l) => brokenLink(l, readIfThere)).filter((p) => p !== null)).toEqual([]);
});

it('theLinkCheckCatchesAMissingFileAndAMissingHeading', () => {
  const docs: Record<string, string> = { 'docs/a.md': '# A\n\n## Some `code` here\n', 'README.md': '' };
  const read = (file: string) => docs[file] ?? null;
  const check = (target: string) => brokenLink({ file: 'README.md', line: 1, target, text: 'x' }, read);
  expect(check('docs/a.md#some-code-here')).toBeNull();
  expect(check('docs/a.md#a')).toBeNull();
  expect(check('docs/b.md')).toMatch(/no file docs\/b\.md/);
  expect(check('docs/a.md#leases')).toMatch(/has no heading #leases/);
  expect(check('https://example.com/x#y')).toBeNull();
});

/** Every file of src/, recursively. */
function sources(dir = 'src'): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(`${dir}/${e.name}`) : e.name.endsWith('.ts') ? [`${dir}/${e.name}`] : [],
  );
}

const CITATION = /\b(README(?:\.md)?|DESIGN(?:\.md)?|BENCHMARKS(?:\.md)?|docs\/[\w./-]+\.md)[,:]? "([^"\n]+)"/g;

interface Citation {
  readonly where: string;
  readonly doc: string;
  readonly title: string;
}

function citationsIn(file: string, text: string): Citation[] {
  return [...text.matchAll(CITATION)].map((m) => ({
    where: `${file}:${text.slice(0, m.index).split('\n').length}`,
    doc: m[1]!.endsWith('.md') ? m[1]! : `${m[1]}.md`,
    title: m[2]!,
  }));
}

/** The lead of each paragraph that opens with a bold title (`**What nothing covers.** ...`), backticks removed. */
function boldLeadsOf(text: string): string[] {
  return [...text.matchAll(/^(?:- )?\*\*([^*\n]+?)\*\*/gm)].map((m) => m[1]!.replaceAll('`', '').replace(/[.:]$/, ''));
}

/**
 * Whether `title` names a section of `doc`: a heading, or the bold title a paragraph opens with,
 * that starts with it (backticks aside). For
 * README.md, which links to every guide, the text of one of its links will do as well: it is
 * where a reader sent to "README, <title>" finds the section.
 */
function cites(doc: string, title: string, read: (file: string) => string | null): boolean {
  const text = read(doc);
  if (text === null) return false;
  const wanted = title.replaceAll('`', '').toLowerCase();
  const names = [...headingsOf(text), ...boldLeadsOf(text)];
  if (doc === 'README.md') names.push(...linksOf(doc, text).map((l) => l.text.replaceAll('`', '')));
  return names.some((name) => name.toLowerCase().startsWith(wanted));
}

it('everySectionCitedByTitleInTheSourcesAndDocumentsIsAHeadingOfItsDocument', () => {
  const files = [...sources(), ...allDocFiles(), 'bench/where-the-time-goes.md'];
  const citations = files.flatMap((file) => citationsIn(file, readFileSync(join(root, file), 'utf8')));
  expect(citations.length).toBeGreaterThan(40);
  const wrong = citations.filter((c) => !cites(c.doc, c.title, readIfThere)).map((c) => `${c.where}: ${c.doc}, "${c.title}"`);
  expect(wrong).toEqual([]);
});

it('theCitationCheckCatchesATitleThatIsNoHeading', () => {
  const docs: Record<string, string> = {
    'docs/internals/core.md': '# The core\n\n### Lazy acks\n\n**What `sync` promises.** One fsync.\n',
    'DESIGN.md': '# Design\n\n- [Lazy acks](docs/internals/core.md#lazy-acks)\n',
    'README.md': '# R\n\n- [Leases](docs/x.md#leases)\n',
  };
  const read = (file: string) => docs[file] ?? null;
  const [core, readme, guide, design] = citationsIn(
    'src/x.ts',
    '// docs/internals/core.md, "Lazy acks"; README, "Leases"; docs/x.md, "Leases"; DESIGN.md, "Lazy acks"',
  );
  expect(core).toMatchObject({ doc: 'docs/internals/core.md', title: 'Lazy acks' });
  expect(cites(core!.doc, core!.title, read)).toBe(true);
  expect(cites(readme!.doc, readme!.title, read)).toBe(true);
  expect(cites(guide!.doc, guide!.title, read)).toBe(false);
  // The map links to the section but is not where it is: the old citation fails.
  expect(design).toMatchObject({ doc: 'DESIGN.md', title: 'Lazy acks' });
  expect(cites(design!.doc, design!.title, read)).toBe(false);
  expect(cites('docs/internals/core.md', 'What `sync` promises', read)).toBe(true);
  expect(cites('docs/internals/core.md', 'Eager acks', read)).toBe(false);
});

// The README is the front door, read in minutes: short, and every page under docs/ is one link from
// it (the generated API reports are one link from the reference's index, which it links).
it('theReadmeIsShortAndLinksEveryPageUnderDocs', () => {
  const readme = docText('README.md');
  expect(readme.split('\n').length).toBeLessThanOrEqual(300);
  const linked = new Set(linksOf('README.md', readme).map((l) => l.target.split('#')[0]));
  const pages = docFiles().filter((f) => f.startsWith('docs/') && !f.startsWith('docs/reference/api/'));
  expect(pages.length).toBeGreaterThan(15);
  expect(pages.filter((page) => !linked.has(page))).toEqual([]);
});
