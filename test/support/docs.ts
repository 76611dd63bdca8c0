/**
 * The repository's documents as the tests read them: the code blocks of README.md and docs/**,
 * found by what they contain wherever they live, and the headings and links of every document.
 *
 * A test takes a block with `docBlock(lang, ...needles)`: the one fenced block of that language
 * containing every needle. Its needles are string literals, so test/docs/code-blocks.test.ts can
 * read them out of the test sources and check that every block is claimed by some test.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

export const root = resolve(import.meta.dirname, '..', '..');

/** The documents whose code blocks must run: README.md and every Markdown file under docs/. */
export function docFiles(): string[] {
  const found: string[] = ['README.md'];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) found.push(path);
    }
  };
  walk('docs');
  return found;
}

/** Every Markdown document of the repository that links or is linked: the root ones and docs/. */
export function allDocFiles(): string[] {
  return [...docFiles(), 'CHANGELOG.md', 'CONTRIBUTING.md', 'DESIGN.md', 'FORMAT.md', 'BENCHMARKS.md'];
}

const cache = new Map<string, string>();
export function docText(file: string): string {
  let text = cache.get(file);
  if (text === undefined) {
    text = readFileSync(join(root, file), 'utf8');
    cache.set(file, text);
  }
  return text;
}

export interface Block {
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly lang: string;
  readonly body: string;
}

/** The fenced blocks of `text`, in order (a fence is three backticks at the start of a line, possibly indented). */
export function blocksOf(file: string, text: string): Block[] {
  const blocks: Block[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)```(\S*)\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const indent = open[1]!.length;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !/^ *```\s*$/.test(lines[j]!); j++)
      body.push(lines[j]!.slice(Math.min(indent, /^ */.exec(lines[j]!)![0].length)));
    blocks.push({ file, line: i + 1, lang: open[2]!, body: body.length === 0 ? '' : `${body.join('\n')}\n` });
    i = j;
  }
  return blocks;
}

/** Every fenced block of the documents of `docFiles()`. */
export function docBlocks(): Block[] {
  return docFiles().flatMap((file) => blocksOf(file, docText(file)));
}

/** The one block in `blocks` of `lang` that contains every needle; throws unless exactly one does. */
export function findBlock(blocks: readonly Block[], lang: string, needles: readonly string[]): Block {
  const matches = blocks.filter((b) => b.lang === lang && needles.every((n) => b.body.includes(n)));
  const where = (bs: readonly Block[]) => bs.map((b) => `${b.file}:${b.line}`).join(', ');
  if (matches.length !== 1) {
    throw new Error(
      `expected one \`\`\`${lang} block containing ${JSON.stringify(needles)} in README.md or docs/, found ${matches.length}${matches.length ? ` (${where(matches)})` : ''}`,
    );
  }
  return matches[0]!;
}

/** The body of the one ```lang block of the documents that contains every needle (string literals only: see the file comment). */
export function docBlock(lang: 'js' | 'ts', ...needles: string[]): string {
  return findBlock(docBlocks(), lang, needles).body;
}

/** The Markdown text of `file` with every fenced block blanked (line count kept). */
function outsideBlocks(text: string): string {
  return text.replace(/^( *)```[^\n]*\n[\s\S]*?^ *```[^\n]*$/gm, (m) => m.replace(/[^\n]/g, ''));
}

/**
 * The anchor GitHub gives a heading: lowercased, every character but letters, digits, marks,
 * `-`, `_` and spaces removed, spaces made `-`; a repeated anchor gets `-1`, `-2`, ...
 */
export function anchorsOf(text: string): string[] {
  const seen = new Map<string, number>();
  const anchors: string[] = [];
  for (const m of outsideBlocks(text).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}_\- ]/gu, '')
      .replaceAll(' ', '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.push(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** The text of each heading of `text` (outside code blocks), backticks removed. */
export function headingsOf(text: string): string[] {
  return [...outsideBlocks(text).matchAll(/^#{1,6} +(.+?) *#*$/gm)].map((m) => m[1]!.replaceAll('`', ''));
}

export interface Link {
  readonly file: string;
  readonly line: number;
  readonly target: string;
  readonly text: string;
}

/** The Markdown links of `text` (outside code blocks and inline code), with their link text. */
export function linksOf(file: string, text: string): Link[] {
  const plain = outsideBlocks(text).replace(/`[^`\n]*`/g, (m) => (m.includes('](') ? m.replace(/[^\n]/g, ' ') : m));
  const links: Link[] = [];
  for (const m of plain.matchAll(/\[((?:[^[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)/g)) {
    links.push({ file, line: plain.slice(0, m.index).split('\n').length, target: m[2]!, text: m[1]!.replace(/\s+/g, ' ') });
  }
  return links;
}

/** `to` (a path from the repository root) as written from a document at `from`. */
export function relativeLink(from: string, to: string): string {
  return relative(join(root, from, '..'), join(root, to));
}
