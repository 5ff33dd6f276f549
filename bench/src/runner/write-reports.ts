import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { htmlReport, markdownReport, summarize, type ReportSummary, type ScenarioResults } from '../report';
import type { Scenario } from './scenario';

export interface WrittenReports {
  readonly summary: ReportSummary;
  readonly json: string;
  readonly markdown: string;
  readonly html: string;
}

/**
 * Writes a scenario's results to `outDir`: results.json (the scenario as run, every request's record,
 * backend counter deltas), report.md (tables) and report.html (self-contained, SVG charts).
 */
export async function writeReports(
  outDir: string,
  scenario: Scenario,
  results: ScenarioResults,
  meta: Readonly<Record<string, unknown>> = {},
): Promise<WrittenReports> {
  await mkdir(outDir, { recursive: true });
  const summary = summarize(results);
  const paths = {
    json: join(outDir, 'results.json'),
    markdown: join(outDir, 'report.md'),
    html: join(outDir, 'report.html'),
  };
  await writeFile(
    paths.json,
    `${JSON.stringify({ generatedAt: new Date().toISOString(), ...meta, scenario, results })}\n`,
  );
  await writeFile(paths.markdown, markdownReport(summary));
  await writeFile(paths.html, htmlReport(results, summary));
  return { summary, ...paths };
}
