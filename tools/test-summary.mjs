// Sums the vitest JSON reports of one or more Nx test targets and prints the closing line CI reads:
// `N passed, N failed, N skipped`. Above it, it names every test that was skipped or failed, and, when
// the system tests were not part of the run, which ones `npm run test:system` runs instead.
//
//   node tools/test-summary.mjs test               # after `nx run-many -t test` (npm test)
//   node tools/test-summary.mjs test-system        # after `nx run-many -t test-system` (npm run test:system)
//   node tools/test-summary.mjs test test-system   # both (.ci/run)
//   node tools/test-summary.mjs test --expect=workspace-alone.json   # and fail if that report is missing
//
// Reports are test-reports/<target>/*.json: one for the whole workspace (vitest.config.ts, when
// tools/run-tests.mjs runs the target) or one per project (vitest.shared.ts, when Nx runs it); test files
// are counted by the project folder they are in. "failed" counts failing tests, plus each test file that
// failed to run and each project with no test file in any report. Exits 1 if anything failed or no test
// passed.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { workspaceProjectDirs } from './workspace-projects.mjs';

const ROOT = join(import.meta.dirname, '..');
const SYSTEM_TEST_SUFFIX = '.system.test.ts';
/**
 * `--expect=<report file>` (repeatable): a report the run must have written under test-reports/<first target>/; one
 * that is missing counts as a failure (a vitest part that crashed before writing it would otherwise vanish from the
 * counts, its projects still covered by the other part's report).
 */
const expectedReports = process.argv
  .slice(2)
  .filter((arg) => arg.startsWith('--expect='))
  .map((arg) => arg.slice('--expect='.length));
const positional = process.argv.slice(2).filter((arg) => !arg.startsWith('--'));
const targets = positional.length > 0 ? positional : ['test'];

/** Files under `dir` whose name ends with `suffix`, skipping node_modules and dot folders. */
function filesEndingWith(dir, suffix) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((item) => {
    if (item.isDirectory())
      return item.name === 'node_modules' || item.name.startsWith('.')
        ? []
        : filesEndingWith(join(dir, item.name), suffix);
    return item.name.endsWith(suffix) ? [join(dir, item.name)] : [];
  });
}

const projects = workspaceProjectDirs(ROOT).map((dir) => ({
  dir,
  name: basename(dir),
  scripts: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).scripts ?? {},
}));
const total = { passed: 0, failed: 0, skipped: 0 };
const perTarget = [];
const lines = [];
const skippedTests = [];
const failures = [];

/**
 * Every test file result in the JSON reports of `target`, by absolute path. One report per project (an Nx run of
 * the target) or one for the whole workspace (tools/run-tests.mjs): either way each file counts once, from the
 * newest report that has it.
 */
function fileResults(target) {
  const dir = join(ROOT, 'test-reports', target);
  if (!existsSync(dir)) return new Map();
  const reports = readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .map((name) => join(dir, name))
    .sort((a, b) => statSync(a).mtimeMs - statSync(b).mtimeMs);
  const files = new Map();
  for (const report of reports)
    for (const file of JSON.parse(readFileSync(report, 'utf8')).testResults) files.set(file.name, file);
  return files;
}

/**
 * The first lines of a failed test's message, indented under it: CI keeps only the tail of a run's
 * output, where the summary is, so a failure that does not say why cannot be told from a flake.
 */
function failureCause(test) {
  const message = (test.failureMessages ?? []).join('\n').replace(/\u001b\[[0-9;]*m/g, '');
  const lines = message.split('\n').filter((line) => line.trim() !== '');
  // The message and its diff first; of the stack, only the first frame (the test's line).
  const frames = lines.filter((line) => /^\s*at /.test(line));
  const shown = [...lines.filter((line) => !/^\s*at /.test(line)).slice(0, 8), ...frames.slice(0, 1)];
  return shown.map((line) => `\n    ${line.trimEnd().slice(0, 300)}`).join('');
}

for (const target of targets) {
  const counts = { passed: 0, failed: 0, skipped: 0 };
  const files = [...fileResults(target).values()];
  for (const project of projects.filter((candidate) => candidate.scripts[target] !== undefined)) {
    const own = files.filter((file) => file.name.startsWith(`${project.dir}/`));
    if (own.length === 0) {
      counts.failed += 1;
      failures.push(
        `no report: ${project.name} (no test file of it in ${relative(ROOT, join(ROOT, 'test-reports', target))}/*.json)`,
      );
      continue;
    }
    const projectCounts = { passed: 0, failed: 0, skipped: 0 };
    for (const file of own) {
      const path = relative(ROOT, file.name);
      for (const test of file.assertionResults) {
        if (test.status === 'passed') projectCounts.passed += 1;
        else if (test.status === 'failed') {
          projectCounts.failed += 1;
          failures.push(`failed: ${path} › ${test.fullName}${failureCause(test)}`);
        } else {
          projectCounts.skipped += 1;
          skippedTests.push(`${test.status}: ${path} › ${test.fullName}`);
        }
      }
      if (file.status === 'failed' && !file.assertionResults.some((test) => test.status === 'failed')) {
        projectCounts.failed += 1;
        failures.push(`failed to run: ${path}: ${file.message.split('\n')[0]}`);
      }
    }
    for (const key of Object.keys(counts)) counts[key] += projectCounts[key];
    lines.push(
      `${targets.length > 1 ? `${target} ` : ''}${project.name}: ${projectCounts.passed} passed, ${projectCounts.failed} failed` +
        `${projectCounts.skipped > 0 ? `, ${projectCounts.skipped} skipped` : ''}`,
    );
  }
  perTarget.push(`${target}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped`);
  for (const key of Object.keys(total)) total[key] += counts[key];
}

for (const report of expectedReports) {
  if (existsSync(join(ROOT, 'test-reports', targets[0], report))) continue;
  total.failed += 1;
  failures.push(`no report: test-reports/${targets[0]}/${report} (its vitest run ended before writing it)`);
}

console.log(lines.join('\n'));
if (targets.length > 1) console.log(perTarget.join('\n'));
for (const line of [...skippedTests, ...failures]) console.log(line);
if (targets.includes('test') && !targets.includes('test-system')) {
  const systemTests = projects
    .flatMap((project) => filesEndingWith(project.dir, SYSTEM_TEST_SUFFIX))
    .map((path) => relative(ROOT, path))
    .sort();
  if (systemTests.length > 0)
    console.log(
      `not run here: ${systemTests.length} system test files (they need haproxy, wrk, promtool, Compose ` +
        `or kubectl; npm run test:system runs them):\n  ${systemTests.join('\n  ')}`,
    );
}
console.log(`${total.passed} passed, ${total.failed} failed, ${total.skipped} skipped`);
process.exit(total.failed > 0 || total.passed === 0 ? 1 : 0);
