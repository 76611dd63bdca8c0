/**
 * The import graph of src/ as test/docs/structure.test.ts reads it: every import and re-export of
 * every `.ts` file, runtime or type-only, and the cycles in a set of them.
 *
 * The tsconfig sets `verbatimModuleSyntax`, so only `import type` and `export type … from` are
 * erased; `import { type A } from './a.js'` still loads `./a.js` at run time and is a runtime edge
 * here too. Imports are found by patterns anchored at the start of a line, which is where this
 * code writes them; the `from '…'` of an example in a doc comment follows a `*` and is never seen.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix } from 'node:path';

/** One import: by `from` (a path from the root, `src/core/queue-core.ts`) of `to`. */
export interface Edge {
  readonly from: string;
  /** The imported file for a relative specifier (`src/core/entry.ts`); else the specifier (`node:fs`). */
  readonly to: string;
  /** False for `import type` and `export type … from`: erased when compiled. */
  readonly runtime: boolean;
}

/** What may stand between `import`/`export` and `from`: a namespace, a list, a default and more. */
const CLAUSE = String.raw`(?:\*(?:\s+as\s+[\w$]+)?|\{[^}]*\}|[\w$]+(?:\s*,\s*(?:\{[^}]*\}|\*\s+as\s+[\w$]+))?)`;
const WITH_FROM = new RegExp(String.raw`^[ \t]*(?:import|export)\s+(type\s+)?${CLAUSE}\s*from\s*(['"])([^'"\n]+)\2`, 'gm');
const BARE = /^[ \t]*import\s*(['"])([^'"\n]+)\1/gm;
const DYNAMIC = /\bimport\(\s*(['"])([^'"\n]+)\1\s*\)/g;

/** The imports of one file, given its path from the root (forward slashes) and its text. */
export function importsOf(path: string, text: string): Edge[] {
  const edges: Edge[] = [];
  const add = (specifier: string, runtime: boolean): void => {
    edges.push({ from: path, to: specifier.startsWith('.') ? resolveSpecifier(path, specifier) : specifier, runtime });
  };
  for (const m of text.matchAll(WITH_FROM)) add(m[3]!, m[1] === undefined);
  for (const m of text.matchAll(BARE)) add(m[2]!, true);
  for (const m of text.matchAll(DYNAMIC)) add(m[2]!, true);
  return edges;
}

/** `./core.js` imported by `src/core/batches.ts` is `src/core/queue-core.ts`. */
function resolveSpecifier(from: string, specifier: string): string {
  const path = posix.normalize(posix.join(posix.dirname(from), specifier));
  return path.endsWith('.js') ? `${path.slice(0, -3)}.ts` : path;
}

/** Every `.ts` file under `dir` (a path from `root`), as paths from `root`, sorted. */
export function sourceFiles(root: string, dir: string): string[] {
  const found: string[] = [];
  const walk = (rel: string): void => {
    for (const entry of readdirSync(join(root, rel), { withFileTypes: true })) {
      const path = `${rel}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) found.push(path);
    }
  };
  walk(dir);
  return found.sort();
}

/** The imports of every `.ts` file under `dir`. */
export function importGraph(root: string, dir: string): Edge[] {
  return sourceFiles(root, dir).flatMap((path) => importsOf(path, readFileSync(join(root, path), 'utf8')));
}

/**
 * The cycles among `edges`: for each group of files that reach one another (a strongly connected
 * component of more than one file, or a file importing itself), one shortest path from its first
 * file in name order back to that file, `[a, b, a]`. The same graph always gives the same paths.
 */
export function cyclesOf(edges: readonly Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const { from, to } of edges) {
    const list = next.get(from) ?? [];
    if (!list.includes(to)) list.push(to);
    next.set(from, list);
  }
  for (const list of next.values()) list.sort();
  const cycles: string[][] = [];
  for (const component of components([...next.keys()].sort(), next)) {
    const first = component.sort()[0]!;
    const selfLoop = (next.get(first) ?? []).includes(first);
    if (component.length > 1 || selfLoop) cycles.push(selfLoop ? [first, first] : shortestLoop(first, new Set(component), next));
  }
  return cycles.sort((a, b) => (a[0]! < b[0]! ? -1 : 1));
}

/** The strongly connected components (Tarjan's algorithm, with an explicit stack). */
function components(nodes: readonly string[], next: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    onStack.add(node);
  };
  for (const start of nodes) {
    if (index.has(start)) continue;
    visit(start);
    const path: { node: string; nextIndex: number }[] = [{ node: start, nextIndex: 0 }];
    while (path.length > 0) {
      const frame = path[path.length - 1]!;
      const successors = next.get(frame.node) ?? [];
      if (frame.nextIndex < successors.length) {
        const to = successors[frame.nextIndex++]!;
        if (!index.has(to)) {
          visit(to);
          path.push({ node: to, nextIndex: 0 });
        } else if (onStack.has(to)) {
          low.set(frame.node, Math.min(low.get(frame.node)!, index.get(to)!));
        }
        continue;
      }
      path.pop();
      const parent = path[path.length - 1];
      if (parent !== undefined) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(frame.node)!));
      if (low.get(frame.node) !== index.get(frame.node)) continue;
      const component: string[] = [];
      for (let member = ''; member !== frame.node; ) {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      }
      found.push(component);
    }
  }
  return found;
}

/** A shortest path from `start` back to itself through `members` (breadth first). */
function shortestLoop(start: string, members: ReadonlySet<string>, next: ReadonlyMap<string, readonly string[]>): string[] {
  const cameFrom = new Map<string, string>();
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    const node = queue[i]!;
    for (const to of next.get(node) ?? []) {
      if (!members.has(to)) continue;
      if (to === start) {
        const loop = [start];
        for (let at = node; at !== start; at = cameFrom.get(at)!) loop.unshift(at);
        loop.unshift(start);
        return loop;
      }
      if (cameFrom.has(to)) continue;
      cameFrom.set(to, node);
      queue.push(to);
    }
  }
  throw new Error(`${start} is in a cycle but has no path back to itself`);
}
