// Runs one test target over every project that has it, then prints its summary (test-summary.mjs), so the
// command's last line is `N passed, N failed, N skipped`:
//   node tools/run-tests.mjs test          # npm test, after lint and typecheck (tools/check-code.mjs)
//   node tools/run-tests.mjs test-system   # npm run test:system, after ensure-system-tools.sh
// `test` is one vitest run over the whole workspace (vitest.config.ts): one pool of workers for every project's
// files, where one Nx task per project ran one vitest after another. Nx still runs `test-system` (its
// files are few and each starts processes of its own, so they run one at a time anyway) and `nx test <project>`.
// Old reports of the target are removed first, so the summary counts this run only. Exits 1 if the run or
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
const [command, args] =
  target === 'test' ? ['vitest', ['run']] : ['nx', ['run-many', '-t', target, '--outputStyle=stream']];
const run = spawnSync(join(ROOT, 'node_modules', '.bin', command), args, { cwd: ROOT, stdio: 'inherit' });
if (run.status !== 0)
  console.log(`${command} ${args.join(' ')} failed (${run.error?.message ?? `exit ${run.status ?? run.signal}`})`);
const summary = spawnSync(process.execPath, [join(import.meta.dirname, 'test-summary.mjs'), target], {
  cwd: ROOT,
  stdio: 'inherit',
});
process.exit(run.status === 0 && summary.status === 0 ? 0 : 1);
