// Runs one test target over every project that has it, then prints its summary (test-summary.mjs), so the
// command's last line is `N passed, N failed, N skipped`:
//   node tools/run-tests.mjs test          # npm test, after the format and import-cycle checks
//   node tools/run-tests.mjs test-system   # npm run test:system, after ensure-system-tools.sh
//
// `test` runs the files in two vitest runs, one after the other, with lint and typecheck beside them:
//   - every file without a wall-clock bound, 4 at a time (vitest.config.ts WORKERS): they spend most of their time
//     waiting on the servers and timers they start, so 4 on 2 cores keep both busy;
//   - then the files with wall-clock bounds (vitest.config.ts RUN_ALONE), one at a time, with nothing else running;
//   - lint and typecheck (tools/check-code.mjs) from the start, at nice 19 (the lowest CPU priority), so they take only
//     the CPU the tests leave idle. Their output is held, printed at the end and written as it comes to
//     test-reports/test/lint-and-typecheck.log.
// Tried on 2026-12-07 and dropped: the bounded files at once with the others, the others at nice 10 or 19. ~4 min
// instead of ~6, but in 11 runs a bounded file missed its bound (CFS weighs each thread: eight busy ones at nice 10
// can take ~45 % of a core from it, by the kernel's weights; not measured), and at nice 19 a starved router's Redis calls passed its 50 ms timeout. Any part
// failing fails
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
let results;
if (target === 'test') {
  const checks = start(
    'lint and typecheck (tools/check-code.mjs)',
    process.execPath,
    [join(import.meta.dirname, 'check-code.mjs')],
    {
      nice: 19,
      held: 'lint-and-typecheck.log',
    },
  );
  const sideBySide = await start('tests side by side', VITEST, ['run'], { env: { KVTEST_SET: 'side-by-side' } });
  const alone = await start('tests with wall-clock bounds, one at a time', VITEST, ['run'], {
    env: { KVTEST_SET: 'alone' },
  });
  results = [sideBySide, alone, await checks];
} else {
  results = [
    await start(`nx ${target}`, join(ROOT, 'node_modules', '.bin', 'nx'), [
      'run-many',
      '-t',
      target,
      '--outputStyle=stream',
    ]),
  ];
}
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
