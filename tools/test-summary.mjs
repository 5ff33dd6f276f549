// Sums the vitest JSON reports that `npm test` leaves in test-reports/ and prints the closing line
// CI reads: `N passed, N failed` (plus skipped). Exits 1 if any test failed or no test ran.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = join(import.meta.dirname, '..', 'test-reports');
let passed = 0;
let failed = 0;
let skipped = 0;
const perProject = [];
for (const file of readdirSync(dir).filter((name) => name.endsWith('.json')).sort()) {
  const report = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  passed += report.numPassedTests;
  failed += report.numFailedTests;
  skipped += report.numPendingTests + (report.numTodoTests ?? 0);
  perProject.push(`${file.replace(/\.json$/, '')}: ${report.numPassedTests} passed, ${report.numFailedTests} failed`);
}
console.log(perProject.join('\n'));
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
