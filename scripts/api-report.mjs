// The public surface of the package, one report per entry point of package.json's `exports`,
// read from the declarations the package ships (dist/**/*.d.ts, as `npm run build` writes them):
// every name the entry point exports with its declaration, in name order; then the declarations
// those name that the entry point does not export (a user reaches them through an export: the
// members LogStore inherits, an option type); then what they take from other packages. Written
// to docs/reference/api/<entry>.api.md and checked into git, so that a change of the public
// surface shows in review; test/docs/api-report.test.ts fails when the files are not current.
//
// Usage: npm run build && node scripts/api-report.mjs          write the reports
//        node scripts/api-report.mjs --check                     exit 1, naming them, when any differs
//
// It reads declarations as tsc emits them (one top-level statement at a time, bodies only in
// braces) with a small scanner, not a type checker: no installed package can do that here, and
// the emitted files are regular enough that a scanner sees every export and every name.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repositoryRoot = dirname(here);
/** Where the reports go, from the repository root. */
export const REPORT_DIR = 'docs/reference/api';

// ---------------------------------------------------------------- reading a declaration file

/**
 * The top-level statements of a declaration file: for each, its text with every comment left
 * out, and the JSDoc comment just before it (or null).
 */
export function statementsOf(source) {
  const statements = [];
  let i = 0;
  let doc = null;
  const n = source.length;
  while (i < n) {
    const c = source[i];
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (source.startsWith('//', i)) {
      i = lineEnd(source, i);
      continue;
    }
    if (source.startsWith('/*', i)) {
      const end = source.indexOf('*/', i + 2) + 2;
      if (source.startsWith('/**', i)) doc = source.slice(i, end);
      i = end;
      continue;
    }
    const { text, end } = statementAt(source, i);
    statements.push({ text, doc });
    doc = null;
    i = end;
  }
  return statements;
}

function lineEnd(s, i) {
  const e = s.indexOf('\n', i);
  return e < 0 ? s.length : e;
}

/** Keywords whose declaration ends with its closing brace, not with a semicolon. */
const BLOCK_KINDS = new Set(['class', 'interface', 'namespace', 'module', 'enum', 'global']);

/** One statement from `start`: its text without comments (blank lines dropped), and where it ends. */
function statementAt(s, start) {
  const kind = kindOf(s.slice(start, start + 200));
  let depth = 0;
  let out = '';
  let i = start;
  while (i < s.length) {
    const c = s[i];
    if (c === "'" || c === '"') {
      const end = stringEnd(s, i, c);
      out += s.slice(i, end);
      i = end;
      continue;
    }
    if (c === '`') {
      const end = templateEnd(s, i);
      out += s.slice(i, end);
      i = end;
      continue;
    }
    if (s.startsWith('//', i)) {
      i = lineEnd(s, i);
      continue;
    }
    if (s.startsWith('/*', i)) {
      i = s.indexOf('*/', i + 2) + 2;
      continue;
    }
    out += c;
    i++;
    if (c === '{' || c === '(' || c === '[' || c === '<') depth++;
    else if (c === '}' || c === ')' || c === ']' || (c === '>' && s[i - 2] !== '=')) depth--;
    if (depth === 0 && (c === ';' || (c === '}' && BLOCK_KINDS.has(kind)))) break;
  }
  const text = out
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => line.replace(/\s+$/, ''))
    .join('\n');
  return { text, end: i };
}

function stringEnd(s, i, quote) {
  let j = i + 1;
  while (j < s.length && s[j] !== quote) j += s[j] === '\\' ? 2 : 1;
  return j + 1;
}

/** The end of a template literal type starting at `i`, `${...}` parts included. */
function templateEnd(s, i) {
  let j = i + 1;
  while (j < s.length && s[j] !== '`') {
    if (s[j] === '\\') j += 2;
    else if (s.startsWith('${', j)) {
      let depth = 1;
      j += 2;
      while (j < s.length && depth > 0) {
        if (s[j] === '{') depth++;
        else if (s[j] === '}') depth--;
        else if (s[j] === '`') j = templateEnd(s, j) - 1;
        j++;
      }
    } else j++;
  }
  return j + 1;
}

/** The declaration keyword of a statement (`class`, `function`, `type`, ...), modifiers aside. */
function kindOf(head) {
  const words = head.match(/^(?:(?:export|declare|default|abstract|async)\s+)*([A-Za-z]+|\{|\*)/);
  return words ? words[1] : '';
}

const IDENT = '[A-Za-z_$][\\w$]*';

/** What a statement is: an import, a re-export, an export list, or a declaration with its name. */
function classify(text) {
  let m;
  if ((m = /^import\s+(type\s+)?([\s\S]*?)\s+from\s+(['"])(.+?)\3\s*;?$/.exec(text))) {
    return { kind: 'import', clause: m[2], module: m[4] };
  }
  if (/^import\s+(['"])/.test(text)) return { kind: 'side-effect' };
  if ((m = /^export\s+\*\s+as\s+([\w$]+)\s+from\s+(['"])(.+?)\2/.exec(text))) return { kind: 'export-star-as', name: m[1], module: m[3] };
  if ((m = /^export\s+\*\s+from\s+(['"])(.+?)\1/.exec(text))) return { kind: 'export-star', module: m[2] };
  if ((m = /^export\s+(?:type\s+)?\{([\s\S]*?)\}\s*(?:from\s+(['"])(.+?)\2)?\s*;?$/.exec(text))) {
    return { kind: 'export-list', specifiers: specifiersOf(m[1]), module: m[3] ?? null };
  }
  if (/^export\s+(=|as\s+namespace)/.test(text)) return { kind: 'other' };
  if ((m = /^export\s+default\s+([\w$]+)\s*;$/.exec(text))) return { kind: 'export-default-name', local: m[1] };
  const exported = /^export\s/.test(text);
  const rest = text.replace(/^(?:(?:export|declare|default|abstract|async)\s+)*/, '');
  if ((m = new RegExp(`^(?:class|interface|type|enum|namespace|module|function|const|let|var)\\s+(${IDENT})`).exec(rest))) {
    return { kind: 'declaration', name: m[1], exported, isDefault: /^export\s+(?:declare\s+)?default\s/.test(text) };
  }
  if (/^export\s+default\s/.test(text)) return { kind: 'declaration', name: 'default', exported: true, isDefault: true };
  return { kind: 'other' };
}

/** `A, type B, C as D` into `[{ name: 'A', as: 'A' }, ...]`. */
function specifiersOf(list) {
  return list
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map((s) => {
      const [name, as] = s.replace(/^type\s+/, '').split(/\s+as\s+/);
      return { name, as: as ?? name };
    });
}

/** The bindings an import clause makes: local name to `{ module, imported }`. */
function importBindings(clause, module) {
  const bindings = [];
  let rest = clause.trim();
  const ns = /^(?:([\w$]+)\s*,\s*)?\*\s+as\s+([\w$]+)$/.exec(rest);
  if (ns) {
    if (ns[1]) bindings.push([ns[1], { module, imported: 'default' }]);
    bindings.push([ns[2], { module, imported: '*' }]);
    return bindings;
  }
  const braces = rest.indexOf('{');
  if (braces > 0 || braces < 0) {
    const def = (braces < 0 ? rest : rest.slice(0, braces)).replace(/,\s*$/, '').trim();
    if (def !== '') bindings.push([def, { module, imported: 'default' }]);
  }
  if (braces >= 0) {
    rest = rest.slice(braces + 1, rest.lastIndexOf('}'));
    for (const { name, as } of specifiersOf(rest)) bindings.push([as, { module, imported: name }]);
  }
  return bindings;
}

// ---------------------------------------------------------------- modules and their exports

/** A reader of the declaration files under `distDir` (paths relative to the repository root). */
export function declarations(root, distDir = 'dist') {
  const modules = new Map();

  function load(file) {
    let mod = modules.get(file);
    if (mod) return mod;
    const statements = statementsOf(readFileSync(join(root, file), 'utf8')).map((s) => ({ ...s, ...classify(s.text) }));
    const imports = new Map();
    const locals = new Map();
    for (const s of statements) {
      if (s.kind === 'import') for (const [local, b] of importBindings(s.clause, s.module)) imports.set(local, b);
      if (s.kind === 'declaration') {
        if (!locals.has(s.name)) locals.set(s.name, []);
        locals.get(s.name).push(s);
      }
    }
    mod = { file, statements, imports, locals, exports: null };
    modules.set(file, mod);
    return mod;
  }

  /** The declaration file a specifier of `from` names, or null for another package's. */
  function resolve(from, specifier) {
    if (!specifier.startsWith('.')) return null;
    const base = posix.join(posix.dirname(from), specifier).replace(/\.(m|c)?js$/, '');
    for (const candidate of [`${base}.d.ts`, `${base}/index.d.ts`]) if (existsSync(join(root, candidate))) return candidate;
    throw new Error(`${from}: cannot find the declarations of ${specifier}`);
  }

  /** Where `local`, a name in scope in `mod`, is declared: `{ file, name }`, `{ external, name }` or null. */
  function binding(mod, local) {
    if (mod.locals.has(local)) return { file: mod.file, name: local };
    const imported = mod.imports.get(local);
    if (!imported) return null;
    const file = resolve(mod.file, imported.module);
    if (file === null) return { external: imported.module, name: imported.imported };
    if (imported.imported === '*') return { file, name: '*' };
    return exportsOf(file).get(imported.imported) ?? null;
  }

  /** The names `file` exports, each to where it is declared. */
  function exportsOf(file) {
    const mod = load(file);
    if (mod.exports) return mod.exports;
    const out = new Map();
    mod.exports = out;
    const stars = [];
    for (const s of mod.statements) {
      if (s.kind === 'declaration' && s.exported) out.set(s.isDefault ? 'default' : s.name, { file, name: s.name });
      else if (s.kind === 'export-default-name') out.set('default', binding(mod, s.local));
      else if (s.kind === 'export-list') {
        for (const { name, as } of s.specifiers) {
          let target;
          if (s.module === null) target = binding(mod, name);
          else {
            const from = resolve(file, s.module);
            target = from === null ? { external: s.module, name } : exportsOf(from).get(name);
          }
          if (!target) throw new Error(`${file}: cannot find the export ${name}`);
          out.set(as, target);
        }
      } else if (s.kind === 'export-star-as') {
        const from = resolve(file, s.module);
        out.set(s.name, from === null ? { external: s.module, name: '*' } : { file: from, name: '*' });
      } else if (s.kind === 'export-star') stars.push(s.module);
    }
    for (const specifier of stars) {
      const from = resolve(file, specifier);
      if (from === null) continue;
      for (const [name, target] of exportsOf(from)) if (name !== 'default' && !out.has(name)) out.set(name, target);
    }
    return out;
  }

  /** The statements that declare `name` in `file`, in file order. */
  function declarationOf(file, name) {
    return load(file).locals.get(name) ?? [];
  }

  /** Every target the declaration text of `name` in `file` names: in-package ones and other packages' ones. */
  function namedBy(file, name) {
    const mod = load(file);
    const found = [];
    for (const s of declarationOf(file, name)) {
      let text = s.text.replace(/(['"])(?:\\.|(?!\1).)*\1/g, '""');
      text = text.replace(/\bimport\("([^"]+)"\)\.([\w$]+)/g, (_, specifier, member) => {
        const from = resolve(file, specifier);
        found.push(from === null ? { external: specifier, name: member } : exportsOf(from).get(member));
        return '';
      });
      // A name followed by `:`, `?:` or `(` is a property, parameter or method: it names no type.
      for (const m of text.matchAll(new RegExp(`(?<![\\w$.#])${IDENT}(?![\\w$]|\\??:|\\()`, 'g'))) {
        if (m[0] === name) continue;
        const target = binding(mod, m[0]);
        if (target) found.push(target);
      }
    }
    return found.filter((t) => t && !(t.file === file && t.name === name));
  }

  return { exportsOf, declarationOf, namedBy, resolve: (specifier) => resolve(`${distDir}/index.d.ts`, specifier) };
}

// ---------------------------------------------------------------- the reports

/** The report name of an entry point: `.` is `index`, `./testing` is `testing`. */
export function reportName(entry) {
  return entry === '.' ? 'index' : entry.replace(/^\.\//, '').replaceAll('/', '-');
}

/** Each `exports` entry of `pkg` that has declarations: `[entry, typesFile]`, the file relative to the root. */
export function typedEntries(pkg) {
  return Object.entries(pkg.exports)
    .filter(([, target]) => typeof target === 'object' && target.types)
    .map(([entry, target]) => [entry, posix.normalize(target.types)]);
}

const key = (t) => (t.external ? `ext:${t.external}:${t.name}` : `${t.file}:${t.name}`);

/** The Markdown report of one entry point. */
export function reportOf(reader, pkg, entry, typesFile) {
  const exported = [...reader.exportsOf(typesFile)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const exportedKeys = new Set(exported.map(([, t]) => key(t)));
  const subpath = entry === '.' ? pkg.name : `${pkg.name}/${entry.slice(2)}`;
  const lines = [
    `# API report: \`${subpath}\``,
    '',
    `<!-- Generated by scripts/api-report.mjs from ${typesFile}: run \`npm run build && npm run api-report\`, do not edit. -->`,
    '',
    '[persistent-queue](../../../README.md) › [Reference](../README.md) › The published types',
    '',
    `Every name \`${subpath}\` exports, in name order, with its declaration as the package ships it ` +
      "(the export's own doc comment kept, the comments of its members left out); then the declarations those " +
      'name that this entry point does not export, which a user reaches through an export; then what they take ' +
      'from other packages.',
    '',
  ];
  const external = new Map();
  const referenced = new Map();
  const queue = [];
  const visit = (targets) => {
    for (const t of targets) {
      if (t.external) {
        if (!external.has(t.external)) external.set(t.external, new Set());
        external.get(t.external).add(t.name);
      } else if (t.name !== '*' && !exportedKeys.has(key(t)) && !referenced.has(key(t))) {
        referenced.set(key(t), t);
        queue.push(t);
      }
    }
  };
  lines.push('## Exports', '');
  for (const [name, target] of exported) {
    lines.push(...section(reader, name, target, 3));
    if (!target.external && target.name !== '*') visit(reader.namedBy(target.file, target.name));
  }
  while (queue.length > 0) {
    const t = queue.shift();
    visit(reader.namedBy(t.file, t.name));
  }
  if (referenced.size > 0) {
    lines.push('## Named by the exports, not exported', '');
    const sorted = [...referenced.values()].sort((a, b) => (a.file === b.file ? (a.name < b.name ? -1 : 1) : a.file < b.file ? -1 : 1));
    for (const t of sorted) lines.push(...section(reader, `${t.name}\` in \`${t.file}`, t, 3));
  }
  if (external.size > 0) {
    lines.push('## From other packages', '');
    for (const [module, names] of [...external].sort(([a], [b]) => (a < b ? -1 : 1))) {
      lines.push(
        `- \`${module}\`: ${[...names]
          .sort()
          .map((n) => `\`${n}\``)
          .join(', ')}`,
      );
    }
    lines.push('');
  }
  return `${lines.join('\n').replace(/\n+$/, '')}\n`;
}

/** The heading and code block of one name. */
function section(reader, title, target, level) {
  const heading = `${'#'.repeat(level)} \`${title}\``;
  if (target.external) return [heading, '', `Re-exported from \`${target.external}\` (\`${target.name}\`).`, ''];
  if (target.name === '*') return [heading, '', `The namespace of every export of \`${target.file}\`.`, ''];
  const statements = reader.declarationOf(target.file, target.name);
  if (statements.length === 0) throw new Error(`${target.file}: no declaration of ${target.name}`);
  const where = title.includes('` in `') ? '' : `Declared in \`${target.file}\`${target.name === title ? '' : ` as \`${target.name}\``}.`;
  const code = statements.map((s) => (s.doc ? `${reindent(s.doc)}\n${s.text}` : s.text)).join('\n');
  return [heading, '', ...(where ? [where, ''] : []), '```ts', code, '```', ''];
}

/** A top-level doc comment with its continuation lines starting at ` *`. */
function reindent(doc) {
  return doc
    .split('\n')
    .map((line, i) => (i === 0 ? line.trimEnd() : ` ${line.trim()}`))
    .join('\n');
}

/** Every report of the package at `root`: file name under REPORT_DIR to its Markdown. */
export function apiReports(root = repositoryRoot) {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const reader = declarations(root);
  const reports = new Map();
  for (const [entry, typesFile] of typedEntries(pkg)) {
    if (!existsSync(join(root, typesFile))) throw new Error(`${typesFile} is missing: run npm run build first`);
    reports.set(`${reportName(entry)}.api.md`, reportOf(reader, pkg, entry, typesFile));
  }
  return reports;
}

/** The reports that differ from the files under REPORT_DIR of `root` (missing, changed, or there and no longer made). */
export function staleReports(root, reports) {
  const dir = join(root, REPORT_DIR);
  const present = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.api.md')) : [];
  const stale = [];
  for (const [file, text] of reports) {
    const path = join(dir, file);
    if (!existsSync(path) || readFileSync(path, 'utf8') !== text) stale.push(file);
  }
  for (const file of present) if (!reports.has(file)) stale.push(file);
  return stale.sort();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const reports = apiReports();
  if (process.argv.includes('--check')) {
    const stale = staleReports(repositoryRoot, reports);
    if (stale.length > 0) {
      console.error(`API reports not current: ${stale.join(', ')} (run npm run build && npm run api-report, and review the change)`);
      process.exit(1);
    }
    console.log(`${reports.size} API reports current`);
  } else {
    const dir = join(repositoryRoot, REPORT_DIR);
    mkdirSync(dir, { recursive: true });
    for (const file of readdirSync(dir)) if (file.endsWith('.api.md') && !reports.has(file)) rmSync(join(dir, file));
    for (const [file, text] of reports) writeFileSync(join(dir, file), text);
    console.log(`wrote ${[...reports.keys()].map((f) => relative(repositoryRoot, join(dir, f))).join(', ')}`);
  }
}
