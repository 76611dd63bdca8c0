/**
 * The dashboard's screenshots in docs/ are those of the page as it is: `npm run screenshots` writes
 * them with docs/dashboard-pages.txt, the outline of every page (headings, labels, columns, legends,
 * buttons) of a fixed fixture queue; this renders the same fixture again and compares outlines.
 * Figures, times and pixels are left out: they change from run to run.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { chromiumMissing, launchBrowser, root, startFixture, walkPages } from '../../scripts/dashboard-fixture.mjs';

const missing = chromiumMissing();
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

test('theDocsShowTheScreenshots', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const guide = readFileSync(join(root, 'docs', 'guides', 'dashboard.md'), 'utf8');
  expect(readme).toContain('](docs/dashboard-overview.png)');
  for (const name of ['overview', 'dead-letters']) {
    const file = `docs/dashboard-${name}.png`;
    expect(guide, file).toContain(`](../dashboard-${name}.png)`);
    expect(readFileSync(join(root, file)).subarray(0, 8).equals(PNG_MAGIC), `${file} is a PNG`).toBe(true);
  }
});

test.skipIf(missing !== null)(`theScreenshotsShowThePagesAsTheyAreNow${missing === null ? '' : ` (skipped: ${missing})`}`, async () => {
  const fixture = await startFixture();
  const browser = await launchBrowser({ width: 1280, height: 400 });
  try {
    const page = await browser.context.newPage();
    const outline = await walkPages(page, fixture.ui.url);
    const committed = readFileSync(join(root, 'docs', 'dashboard-pages.txt'), 'utf8');
    expect(outline, 'the dashboard changed since its screenshots were taken: run npm run screenshots').toBe(committed);
  } finally {
    await browser.close();
    await fixture.stop();
  }
});
