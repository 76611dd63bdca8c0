/**
 * The page the package ships is the page in src/dashboard/page/: src/dashboard/page-assets.ts is
 * what scripts/build-dashboard.mjs makes of the sources, and every script the page has is loaded.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { PAGE_ASSETS } from '../../src/dashboard/page-assets.js';
import { root } from '../support/child-process.js';

test('theShippedPageIsWhatItsSourcesMake', () => {
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-dashboard.mjs'), '--check'], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const scripts = readdirSync(join(root, 'src', 'dashboard', 'page', 'js')).filter((f) => f.endsWith('.js'));
  for (const f of scripts)
    expect(PAGE_ASSETS[`/js/${f}`]?.body, f).toBe(readFileSync(join(root, 'src', 'dashboard', 'page', 'js', f), 'utf8'));
});

test('noPageScriptWritesMarkup', () => {
  // Text from the queue reaches the page as text nodes and attribute values only.
  for (const [path, asset] of Object.entries(PAGE_ASSETS)) {
    if (!path.endsWith('.js')) continue;
    expect(asset.body, path).not.toMatch(
      /\.(innerHTML|outerHTML)\s*[+]?=|insertAdjacentHTML\(|createContextualFragment\(|document\.write|\beval\(|new Function\(/,
    );
  }
});
