// Prints "N passed, N failed" from vitest's JSON report (written by `npm test` when CI is set).
import { readFileSync } from 'node:fs';

const file = process.argv[2] ?? 'test-results.json';
let report;
try {
  report = JSON.parse(readFileSync(file, 'utf8'));
} catch (error) {
  console.error(`no test report at ${file}: ${error.message}`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
const passed = report.numPassedTests ?? 0;
// A test file that fails to load has no failed tests of its own: count it as one failure.
const brokenFiles = (report.testResults ?? []).filter(
  (f) => f.status === 'failed' && (f.assertionResults ?? []).every((a) => a.status !== 'failed'),
).length;
const failed = (report.numFailedTests ?? 0) + brokenFiles;
const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
if (passed === 0 || failed > 0) process.exit(1);
