import type { PointSummary, PolicySummary, ReportSummary, Stat } from './summary';

/** Terminal tables and the Markdown summary of a ReportSummary (pure: strings out). */

const DASH = '–';

/** `mean ± stddev` with `digits` decimals; just the mean for a single seed. */
export function formatStat(value: Stat | undefined, digits = 1): string {
  if (!value) return DASH;
  return value.n > 1 ? `${value.mean.toFixed(digits)} ± ${value.stddev.toFixed(digits)}` : value.mean.toFixed(digits);
}

function times(value: number | undefined): string {
  return value === undefined ? DASH : `${value.toFixed(2)}×`;
}

function percent(value: number | undefined): string {
  return value === undefined ? DASH : `${value.toFixed(1)} %`;
}

function signed(value: number | undefined, digits = 2): string {
  if (value === undefined) return DASH;
  return `${value >= 0 ? '+' : '−'}${Math.abs(value).toFixed(digits)}`;
}

export const POINT_COLUMNS = [
  'policy',
  'KV hit %',
  'backend hit %',
  'TTFT p50 ms',
  'TTFT p95 ms',
  'TTFT p99 ms',
  'e2e p50 ms',
  'RPS',
  'errors',
  'p50 vs base',
  'p99 vs base',
  'hit % of oracle',
  'hit % of bound',
  'precision %',
  'recall %',
  'unverified %',
] as const;

/** The label of the compulsory-miss bound's row. */
export const BOUND_ROW = 'bound';

function pointRow(summary: PolicySummary, baseline: string | undefined): string[] {
  return [
    summary.policy + (summary.policy === baseline ? ' (base)' : ''),
    formatStat(summary.kvHitPct),
    formatStat(summary.backendHitPct),
    formatStat(summary.ttftP50Ms),
    formatStat(summary.ttftP95Ms),
    formatStat(summary.ttftP99Ms),
    formatStat(summary.e2eP50Ms),
    formatStat(summary.rps, 2),
    formatStat(summary.errors, 1),
    times(summary.vsBaseline?.ttftP50),
    times(summary.vsBaseline?.ttftP99),
    percent(summary.kvHitPctOfOracle ?? summary.backendHitPctOfOracle),
    percent(summary.hitPctOfBound),
    formatStat(summary.precisionPct),
    formatStat(summary.recallPct),
    formatStat(summary.unverifiedPct),
  ];
}

/** The bound's row: its hit % in the KV hit % column, nothing else (it is not a run). */
function boundRow(bound: Stat): string[] {
  return POINT_COLUMNS.map((column, index) =>
    index === 0 ? BOUND_ROW : column === 'KV hit %' ? formatStat(bound) : DASH,
  );
}

/** One row per policy, then the compulsory-miss bound's when it was computed. */
export function pointTableRows(point: PointSummary): string[][] {
  const rows = point.policies.map((summary) => pointRow(summary, point.baseline));
  if (point.bound) rows.push(boundRow(point.bound));
  return rows;
}

function slopeRows(summary: ReportSummary): string[][] {
  return summary.slopes.map((slope) => [
    slope.policy,
    signed(slope.ttftP50MsPerUnit),
    signed(slope.ttftP95MsPerUnit),
    signed(slope.e2eP50MsPerUnit),
  ]);
}

function slopeColumns(summary: ReportSummary): string[] {
  return [
    'policy',
    `TTFT p50 slope (ms per ${summary.sweepVariable})`,
    `TTFT p95 slope (ms per ${summary.sweepVariable})`,
    `e2e p50 slope (ms per ${summary.sweepVariable})`,
  ];
}

export function span(summary: ReportSummary): string {
  const first = summary.points[0];
  const last = summary.points[summary.points.length - 1];
  return first && last ? `${first.value} → ${last.value}` : DASH;
}

/** Fixed-width text table: first column left-aligned, the others right-aligned. */
export function textTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((cell, column) =>
    Math.max([...cell].length, ...rows.map((row) => [...(row[column] ?? '')].length)),
  );
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, column) => {
        const pad = ' '.repeat((widths[column] ?? 0) - [...cell].length);
        return column === 0 ? cell + pad : pad + cell;
      })
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((width) => '─'.repeat(width)).join('  '), ...rows.map(line)].join('\n');
}

/** One table per sweep point, then the slopes: what the runner prints at the end. */
export function terminalReport(summary: ReportSummary): string {
  const blocks = summary.points.map(
    (point) =>
      `${summary.scenario} · ${summary.sweepVariable} = ${point.value}\n${textTable(POINT_COLUMNS, pointTableRows(point))}`,
  );
  // A slope needs two sweep points.
  if (summary.points.length > 1)
    blocks.push(
      `TTFT slope, ${summary.sweepVariable} ${span(summary)}\n${textTable(slopeColumns(summary), slopeRows(summary))}`,
    );
  return `${blocks.join('\n\n')}\n`;
}

export function escapeCell(text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ');
}

export function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const lines = [
    `| ${header.map(escapeCell).join(' | ')} |`,
    `|---|${header
      .slice(1)
      .map(() => '---:|')
      .join('')}`,
  ];
  for (const row of rows) lines.push(`| ${row.map(escapeCell).join(' | ')} |`);
  return lines.join('\n');
}

/** The Markdown summary: one section per sweep point, the slope table and how to read it. */
export function markdownReport(summary: ReportSummary): string {
  const parts = [`# ${escapeCell(summary.scenario)}`, ''];
  parts.push(
    `Mean ± sample stddev over seeds. KV hit % = cached ÷ prompt tokens (client usage); backend hit % = prefix-cache hits ÷ queries (backend counters). ` +
      `e2e p50 = time to the last byte: the figure the seed's tables call "TTFT" (they timed non-streaming responses). ` +
      `"vs base" = mean TTFT ÷ the best of ${'`roundrobin`'} / ${'`leastloaded`'} (lowest TTFT p50) ` +
      `at that point; "hit % of oracle" = hit % ÷ ${'`oracle`'}'s. ` +
      `${'`oracle`'} is greedy and load-blind (largest true hit): a reference, not an upper bound; other policies can exceed it. ` +
      `"${BOUND_ROW}" = the compulsory-miss bound: the same requests replayed one by one through ` +
      `one vllm-sim whose cache never evicts (pooled over the fleet, infinite), ` +
      `so only blocks no earlier request had miss; no placement can beat it. "hit % of bound" = hit % ÷ the bound. ` +
      `precision % = confirmed ÷ predicted tokens, recall % = confirmed ÷ engine-reported cached ` +
      `tokens, unverified % = predictions the engine could not check ` +
      `(the routers' kvroute_router_prefix_* counters, all replicas and backends; – for the bench-side oracles).`,
    '',
  );
  for (const point of summary.points) {
    parts.push(
      `## ${escapeCell(summary.sweepVariable)} = ${point.value}`,
      '',
      markdownTable(POINT_COLUMNS, pointTableRows(point)),
      '',
    );
  }
  // A slope needs two sweep points (as in the terminal summary).
  if (summary.points.length > 1)
    parts.push(
      `## TTFT slope, ${escapeCell(summary.sweepVariable)} ${span(summary)}`,
      '',
      markdownTable(slopeColumns(summary), slopeRows(summary)),
      '',
    );
  return parts.join('\n');
}

/**
 * One sentence on whether `candidate` beat `baseline` on both hit rate and TTFT p50 (the demo's claim),
 * with both figures; undefined when either is missing.
 */
export function policyVerdict(
  candidate: PolicySummary | undefined,
  baseline: PolicySummary | undefined,
): string | undefined {
  const hitA = candidate?.kvHitPct?.mean;
  const hitB = baseline?.kvHitPct?.mean;
  const p50A = candidate?.ttftP50Ms?.mean;
  const p50B = baseline?.ttftP50Ms?.mean;
  if (hitA === undefined || hitB === undefined || p50A === undefined || p50B === undefined) return undefined;
  const won = hitA > hitB && p50A < p50B;
  return (
    `${candidate?.policy} ${won ? 'beats' : 'did NOT beat'} ${baseline?.policy}: KV hit ${hitA.toFixed(1)} ` +
    `% vs ${hitB.toFixed(1)} %, TTFT p50 ${p50A.toFixed(0)} ms vs ${p50B.toFixed(0)} ms${p50A < p50B ? ` (${(p50B / p50A).toFixed(1)}× lower)` : ''}.`
  );
}
