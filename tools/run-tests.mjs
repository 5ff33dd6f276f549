// Runs one test target over every project that has it, then prints its summary (test-summary.mjs), so the
// command's last line is `N passed, N failed, N skipped`:
//   node tools/run-tests.mjs test          # npm test, after the format and import-cycle checks
//   node tools/run-tests.mjs test-system   # npm run test:system, after ensure-system-tools.sh
// `test` is one vitest run over the whole workspace (vitest.config.ts): one pool of workers for every project's
// files, where one Nx task per project ran one vitest after another. Lint and typecheck (tools/check-code.mjs) run
// beside it at the lowest CPU priority (nice 19): the test files spend much of their time waiting on the servers and
// timers they start, and the checks take the CPU those leave idle (~40 s of it, which they took before the tests
// when run first), never the CPU of a test with a wall-clock bound. Their output is held and printed after vitest's,
// so the two do not interleave; either failing fails the command.
// Nx still runs `test-system` (its files are few and each starts processes of its own, so they run one at a time
// anyway) and `nx test <project>`. Old reports of the target are removed first, so the summary counts this run only.
// Exits 1 if the run, the checks or the summary reports a failure.
import { spawn, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const target = process.argv[2];
if (target === undefined) {
  console.error('usage: node tools/run-tests.mjs <nx target>');
  process.exit(2);
}

/** Lint and typecheck in a child whose output is kept; resolves with its exit status and that output. */
function startCodeChecks() {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(import.meta.dirname, 'check-code.mjs')], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, FORCE_COLOR: process.stdout.isTTY ? '1' : '0' },
    });
    // Before it starts tsc and eslint (it reads the tsconfigs first), which inherit the priority.
    if (child.pid !== undefined) setPriority(child.pid, 19);
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
    child.on('error', (error) => resolve({ status: 1, output: `${output}${error.message}\n`, seconds: 0 }));
    child.on('close', (status, signal) =>
      resolve({ status: status ?? signal, output, seconds: (Date.now() - started) / 1000 }),
    );
  });
}

rmSync(join(ROOT, 'test-reports', target), { recursive: true, force: true });
const checks = target === 'test' ? startCodeChecks() : null;
const [command, args] =
  target === 'test' ? ['vitest', ['run']] : ['nx', ['run-many', '-t', target, '--outputStyle=stream']];
// Asynchronous, so the checks' output keeps being read while vitest runs.
const run = await new Promise((resolve) => {
  const child = spawn(join(ROOT, 'node_modules', '.bin', command), args, { cwd: ROOT, stdio: 'inherit' });
  child.on('error', (error) => resolve({ status: 1, error }));
  child.on('close', (status, signal) => resolve({ status: status ?? signal }));
});
if (run.status !== 0)
  console.log(`${command} ${args.join(' ')} failed (${run.error?.message ?? `exit ${run.status}`})`);
let checksPassed = true;
if (checks !== null) {
  const result = await checks;
  checksPassed = result.status === 0;
  console.log(`\nlint and typecheck (tools/check-code.mjs, beside the tests, ${result.seconds.toFixed(0)} s):`);
  process.stdout.write(result.output);
  if (!checksPassed) console.log(`lint and typecheck failed (exit ${result.status})`);
}
const summary = spawnSync(process.execPath, [join(import.meta.dirname, 'test-summary.mjs'), target], {
  cwd: ROOT,
  stdio: 'inherit',
});
process.exit(run.status === 0 && checksPassed && summary.status === 0 ? 0 : 1);
