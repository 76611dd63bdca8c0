#!/usr/bin/env node
// `npm run screenshots`: the dashboard's screenshots in docs/ (README, "`pq ui`: the dashboard"),
// taken in headless Chromium of a fixed fixture queue (scripts/dashboard-fixture.mjs) after half
// a minute of traffic, and docs/dashboard-pages.txt, the outline of every page as it was taken.
// test/dashboard/screenshots.test.ts renders the fixture again and compares its outline with that
// file: a page whose structure changed since the screenshots were taken fails it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromiumMissing, launchBrowser, root, startFixture, walkPages } from './dashboard-fixture.mjs';

const missing = chromiumMissing();
if (missing !== null) {
  console.error(`screenshots: ${missing}`);
  process.exit(1);
}
const warmupMs = Number(process.env.PQ_SCREENSHOT_WARMUP_MS ?? 30_000);
console.log(`screenshots: a fixture queue with a producer and a worker, ${warmupMs / 1000} s of traffic first`);
const fixture = await startFixture();
// A short viewport: a full-page screenshot is then as tall as the page's content.
const browser = await launchBrowser({ width: 1280, height: 400 });
try {
  const page = await browser.context.newPage();
  // The owner measures latencies only while a page watches: the overview is open during the traffic.
  await page.goto(`${fixture.ui.url}#overview`);
  await new Promise((resolve) => setTimeout(resolve, warmupMs));
  const outline = await walkPages(page, fixture.ui.url, async (name) => {
    if (name !== 'overview' && name !== 'dead-letters') return;
    const file = join(root, 'docs', `dashboard-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    console.log(`screenshots: wrote ${file}`);
  });
  writeFileSync(join(root, 'docs', 'dashboard-pages.txt'), outline);
  console.log('screenshots: wrote docs/dashboard-pages.txt');
} finally {
  await browser.close();
  await fixture.stop();
}
