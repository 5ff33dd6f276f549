// Runs one test target over every project that has it, then prints its summary (test-summary.mjs), so the
// command's last line is `N passed, N failed, N skipped`:
//   node tools/run-tests.mjs test          # npm test, after the format and import-cycle checks
//   node tools/run-tests.mjs test-system   # npm run test:system, after ensure-system-tools.sh
//
// `test` starts three things at once, each at its own CPU priority (nice), so a file with a wall-clock bound gets the
// CPU it needs and the rest takes what is left:
//   - the files with wall-clock bounds (vitest.config.ts RUN_ALONE), one at a time, at normal priority;
//   - every other file, 4 at a time (vitest.config.ts WORKERS), at nice 19 (CFS weighs each thread: 8 busy threads
//     of the other files at nice 10 weighed ~85 % of one at nice 0, and a bounded file missed its bound by 7 %);
//   - lint and typecheck (tools/check-code.mjs), at nice 19.
// The test files spend much of their time waiting on the servers and timers they start, so the three share 2 cores
// well: run one after another they took ~6 min from a fresh clone, side by side ~4 (2026-12-07). The side-by-side
// run's output streams; the other two are held and printed after it, so nothing interleaves (and written as they come
// to test-reports/test/alone.log and lint-and-typecheck.log). Any of them failing fails
// the command. Nx still runs `test-system` (its files are few and each starts processes of its own, so they run one at
// a time anyway) and `nx test <project>`. Old reports of the target are removed first, so the summary counts this run
// only.
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { setPriority } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const VITEST = join(ROOT, 'node_modules', '.bin', 'vitest');
/** The vitest runs of `test` (vitest.config.ts KVTEST_SET), each writing test-reports/test/workspace-<set>.json. */
const VITEST_SETS = ['alone', 'side-by-side'];
const target = process.argv[2];
if (target === undefined) {
  console.error('usage: node tools/run-tests.mjs <nx target>');
  process.exit(2);
}

/**
 * Starts `command` at CPU priority `nice` (0 normal .. 19 lowest; the processes it starts inherit it). `held`: a
 * file name under test-reports/<target>/: its output is kept and returned, and written there as it comes (a run
 * killed before the end still shows what it printed), else it goes to this process's. Resolves with its exit status,
 * output and seconds.
 */
function start(name, command, args, { nice = 0, held = null, env = {} } = {}) {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd: ROOT,
      stdio: held !== null ? ['ignore', 'pipe', 'pipe'] : 'inherit',
      env: { ...process.env, ...(held !== null ? { FORCE_COLOR: process.stdout.isTTY ? '1' : '0' } : {}), ...env },
    });
    // Set before the child has started anything of its own, so its workers and tools inherit it. A system that
    // refuses it runs the part at normal priority: slower to share, never a failed run.
    if (nice !== 0 && child.pid !== undefined) {
      try {
        setPriority(child.pid, nice);
      } catch (error) {
        console.log(`${name}: runs at normal priority (${error.message})`);
      }
    }
    let output = '';
    const log = held === null ? null : createWriteStream(join(REPORTS, held));
    const keep = (chunk) => {
      output += chunk;
      log?.write(chunk);
    };
    child.stdout?.setEncoding('utf8').on('data', keep);
    child.stderr?.setEncoding('utf8').on('data', keep);
    const done = (status, error) => resolve({ name, status, error, output, seconds: (Date.now() - started) / 1000 });
    child.on('error', (error) => done(1, error));
    child.on('close', (status, signal) => done(status ?? signal));
  });
}

const REPORTS = join(ROOT, 'test-reports', target);
rmSync(REPORTS, { recursive: true, force: true });
mkdirSync(REPORTS, { recursive: true });
const runs =
  target === 'test'
    ? [
        start('tests with wall-clock bounds, one at a time', VITEST, ['run'], {
          held: 'alone.log',
          env: { KVTEST_SET: 'alone' },
        }),
        start('tests side by side', VITEST, ['run'], { nice: 19, env: { KVTEST_SET: 'side-by-side' } }),
        start(
          'lint and typecheck (tools/check-code.mjs)',
          process.execPath,
          [join(import.meta.dirname, 'check-code.mjs')],
          {
            nice: 19,
            held: 'lint-and-typecheck.log',
          },
        ),
      ]
    : [
        start(`nx ${target}`, join(ROOT, 'node_modules', '.bin', 'nx'), [
          'run-many',
          '-t',
          target,
          '--outputStyle=stream',
        ]),
      ];
const results = await Promise.all(runs);
for (const result of results) {
  if (result.output !== '') {
    console.log(`\n${result.name}, ${result.seconds.toFixed(0)} s:`);
    process.stdout.write(result.output);
  }
  if (result.status !== 0) console.log(`${result.name} failed (${result.error?.message ?? `exit ${result.status}`})`);
}
const expected = target === 'test' ? VITEST_SETS.map((set) => `--expect=workspace-${set}.json`) : [];
const summary = spawnSync(process.execPath, [join(import.meta.dirname, 'test-summary.mjs'), target, ...expected], {
  cwd: ROOT,
  stdio: 'inherit',
});
process.exit(results.every((result) => result.status === 0) && summary.status === 0 ? 0 : 1);
