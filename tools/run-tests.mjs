// Runs one Nx test target over every project that has it, then prints its summary (test-summary.mjs),
// so the command's last line is `N passed, N failed, N skipped`:
//   node tools/run-tests.mjs test          # npm test, after lint and typecheck
//   node tools/run-tests.mjs test-system   # npm run test:system, after ensure-system-tools.sh
// Old reports of the target are removed first, so the summary counts this run only. Exits 1 if Nx or
// the summary reports a failure.
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const target = process.argv[2];
if (target === undefined) {
  console.error('usage: node tools/run-tests.mjs <nx target>');
  process.exit(2);
}

rmSync(join(ROOT, 'test-reports', target), { recursive: true, force: true });
const nx = spawnSync(join(ROOT, 'node_modules', '.bin', 'nx'), ['run-many', '-t', target, '--outputStyle=stream'], {
  cwd: ROOT,
  stdio: 'inherit',
});
if (nx.status !== 0)
  console.log(`nx run-many -t ${target} failed (${nx.error?.message ?? `exit ${nx.status ?? nx.signal}`})`);
const summary = spawnSync(process.execPath, [join(import.meta.dirname, 'test-summary.mjs'), target], {
  cwd: ROOT,
  stdio: 'inherit',
});
process.exit(nx.status === 0 && summary.status === 0 ? 0 : 1);
