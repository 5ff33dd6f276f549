import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { resultsDir } from './app-process';

/** One acceptance check of a benchmark's results, as its report states it. */
export interface ResultCheck {
  readonly name: string;
  readonly passed: boolean;
  readonly measured: string;
}

/**
 * A checked benchmark's end (bench:pd, bench:lora): its report (`heading`, `summary`, the tables, then the checks as a
 * table) printed and written to bench/results/<name>-<time>.md, its data to .json; the exit code 1 when a check fails.
 */
export function reportCheckedResults(
  name: string,
  report: { readonly heading: string; readonly summary: string; readonly tables: string },
  checks: readonly ResultCheck[],
  data: object,
): void {
  const markdown = [
    `# ${report.heading} (${new Date().toISOString()})`,
    '',
    report.summary,
    '',
    report.tables,
    '| check | result | measured |',
    '|---|---|---|',
    ...checks.map((check) => `| ${check.name} | ${check.passed ? 'pass' : '**FAIL**'} | ${check.measured} |`),
    '',
  ].join('\n');
  console.log(`\n${markdown}`);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const base = join(resultsDir(), `${name}-${stamp}`);
  mkdirSync(resultsDir(), { recursive: true });
  writeFileSync(`${base}.md`, markdown);
  writeFileSync(`${base}.json`, JSON.stringify({ checks, ...data }));
  console.log(`results written to ${base}.{md,json}`);
  if (!checks.every((check) => check.passed)) process.exitCode = 1;
}
