import { percentile } from '@kvroute/workloads';
import { BOUND_ROW, POINT_COLUMNS, pointTableRows, span } from './render';
import { ORACLE_POLICY, policyOrder, summarize, type ReportSummary, type ScenarioResults } from './summary';
import {
  axes,
  DEFAULT_FRAME,
  escapeXml,
  formatTick,
  legend,
  linearScale,
  marker,
  niceDomain,
  niceTicks,
  plotArea,
  polyline,
  rect,
  svg,
  type Frame,
  type LegendItem,
} from './svg';

/** The self-contained HTML report: inline SVG charts and tables, no scripts, no external resources. */

export const PALETTE = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
];
export const ORACLE_COLOR = '#111111';
export const BOUND_COLOR = '#999999';

/** A stable colour per policy (order of first appearance), the oracle in black. */
export function policyColors(policies: readonly string[]): Map<string, string> {
  const colors = new Map<string, string>();
  let next = 0;
  for (const policy of policies)
    colors.set(policy, policy === ORACLE_POLICY ? ORACLE_COLOR : (PALETTE[next++ % PALETTE.length] as string));
  return colors;
}

export interface LineSeries {
  readonly label: string;
  readonly color: string;
  readonly points: readonly (readonly [number, number])[];
  readonly dashed?: boolean;
}

export interface LineChartOptions {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly LineSeries[];
  /** Category ticks on x (e.g. the sweep values); nice ticks otherwise. */
  readonly xTicks?: readonly number[];
  /** Fixed y domain (e.g. [0, 1] for a CDF); from the data (from 0) otherwise. */
  readonly yDomain?: readonly [number, number];
  readonly frame?: Frame;
}

export function lineChart(options: LineChartOptions): string {
  const frame = options.frame ?? DEFAULT_FRAME;
  const area = plotArea(frame);
  const xs = options.series.flatMap((series) => series.points.map(([x]) => x));
  const ys = options.series.flatMap((series) => series.points.map(([, y]) => y));
  const xDomain: [number, number] =
    options.xTicks && options.xTicks.length > 0
      ? [Math.min(...options.xTicks), Math.max(...options.xTicks)]
      : niceDomain(xs.length ? Math.min(...xs) : 0, xs.length ? Math.max(...xs) : 1);
  const yDomain: readonly [number, number] = options.yDomain ?? niceDomain(0, ys.length ? Math.max(...ys) : 1);
  const x = linearScale(xDomain, [area.x0, area.x1]);
  const y = linearScale(yDomain, [area.y0, area.y1]);
  const xTicks = (options.xTicks ?? niceTicks(xDomain[0], xDomain[1])).map((value) => ({
    value,
    label: formatTick(value),
  }));
  const body = [
    axes(
      frame,
      { scale: x, ticks: xTicks, label: options.xLabel },
      { scale: y, ticks: niceTicks(yDomain[0], yDomain[1]), label: options.yLabel },
    ),
    ...options.series
      .filter((series) => series.points.length > 0)
      .map((series) => {
        const [only] = series.points;
        // One point (a sweep of one value): a dot, since a line through one point draws nothing.
        if (series.points.length === 1 && only !== undefined)
          return marker(x(only[0]), y(only[1]), series.color, {
            label: series.label,
            title: `${series.label}: ${formatTick(only[1])}`,
          });
        return polyline(
          series.points.map(([px, py]) => [x(px), y(py)] as const),
          series.color,
          { dashed: series.dashed, label: series.label },
        );
      }),
    legend(
      frame,
      options.series.map(
        (series): LegendItem => ({ label: series.label, color: series.color, kind: series.dashed ? 'dashed' : 'line' }),
      ),
    ),
  ];
  return svg(frame, options.title, body.join(''));
}

type Percentile = 'ttftP50Ms' | 'ttftP95Ms';

/** TTFT p50 or p95 (mean over seeds) against the sweep variable, one line per policy. */
export function ttftSweepChart(summary: ReportSummary, figure: Percentile): string {
  const policies = policyOrder(summary.points);
  const colors = policyColors(policies);
  const series = policies.map(
    (policy): LineSeries => ({
      label: policy,
      color: colors.get(policy) as string,
      dashed: policy === ORACLE_POLICY,
      points: summary.points.flatMap((point) => {
        const value = point.policies.find((entry) => entry.policy === policy)?.[figure]?.mean;
        return value === undefined ? [] : [[point.value, value] as const];
      }),
    }),
  );
  const name = figure === 'ttftP50Ms' ? 'p50' : 'p95';
  return lineChart({
    title: `TTFT ${name} vs ${summary.sweepVariable}`,
    xLabel: summary.sweepVariable,
    yLabel: `TTFT ${name} (ms)`,
    series,
    xTicks: summary.points.map((point) => point.value),
  });
}

/** Hit % shown for a policy: client-side (cached ÷ prompt tokens), else the backends' counters. */
function hitOf(entry: ReportSummary['points'][number]['policies'][number] | undefined): number | undefined {
  return entry?.kvHitPct?.mean ?? entry?.backendHitPct?.mean;
}

/** Grouped bars: hit % per policy at each sweep point; the oracle and the compulsory-miss bound as dashed lines across the groups. */
export function hitRateChart(summary: ReportSummary, frame: Frame = DEFAULT_FRAME): string {
  const policies = policyOrder(summary.points);
  const colors = policyColors(policies);
  const barPolicies = policies.filter((policy) => policy !== ORACLE_POLICY);
  const hasOracle = policies.includes(ORACLE_POLICY);
  const area = plotArea(frame);
  const groups = summary.points.length;
  const groupWidth = (area.x1 - area.x0) / Math.max(1, groups);
  const center = (index: number): number => area.x0 + groupWidth * (index + 0.5);
  const barWidth = (groupWidth * 0.8) / Math.max(1, barPolicies.length);
  const y = linearScale([0, 100], [area.y0, area.y1]);
  const parts = [
    axes(
      frame,
      {
        scale: center,
        ticks: summary.points.map((point, index) => ({ value: index, label: formatTick(point.value) })),
        label: summary.sweepVariable,
      },
      { scale: y, ticks: niceTicks(0, 100), label: 'KV hit %' },
    ),
  ];
  summary.points.forEach((point, index) => {
    barPolicies.forEach((policy, slot) => {
      const value = hitOf(point.policies.find((entry) => entry.policy === policy));
      if (value === undefined) return;
      const left = center(index) - (groupWidth * 0.8) / 2 + slot * barWidth;
      parts.push(
        rect(
          left,
          y(value),
          barWidth * 0.9,
          y(0) - y(value),
          colors.get(policy) as string,
          `${policy} @ ${summary.sweepVariable} = ${point.value}: ${value.toFixed(1)} %`,
        ),
      );
    });
  });
  if (hasOracle) {
    const points = summary.points.flatMap((point, index) => {
      const value = hitOf(point.policies.find((entry) => entry.policy === ORACLE_POLICY));
      return value === undefined ? [] : [[center(index), y(value)] as const];
    });
    parts.push(polyline(acrossOneGroup(points), ORACLE_COLOR, { dashed: true, label: ORACLE_POLICY }));
  }
  const boundPoints = summary.points.flatMap((point, index) =>
    point.bound ? [[center(index), y(point.bound.mean)] as const] : [],
  );
  if (boundPoints.length > 0)
    parts.push(polyline(acrossOneGroup(boundPoints), BOUND_COLOR, { dashed: true, label: BOUND_ROW }));
  parts.push(
    legend(frame, [
      ...barPolicies.map((policy): LegendItem => ({ label: policy, color: colors.get(policy) as string, kind: 'box' })),
      ...(hasOracle ? [{ label: ORACLE_POLICY, color: ORACLE_COLOR, kind: 'dashed' as const }] : []),
      ...(boundPoints.length > 0 ? [{ label: BOUND_ROW, color: BOUND_COLOR, kind: 'dashed' as const }] : []),
    ]),
  );
  return svg(frame, `KV hit % per policy vs ${summary.sweepVariable}`, parts.join(''));

  /** A reference line of one point (one sweep value) spans its group's bars: a line through one point draws nothing. */
  function acrossOneGroup(points: ReadonlyArray<readonly [number, number]>): ReadonlyArray<readonly [number, number]> {
    const [only] = points;
    if (points.length !== 1 || only === undefined) return points;
    return [
      [only[0] - groupWidth * 0.45, only[1]],
      [only[0] + groupWidth * 0.45, only[1]],
    ];
  }
}

/** Empirical CDF points (value, fraction ≤ value), at most `maxPoints` (nearest-rank quantiles beyond). */
export function cdfPoints(values: readonly number[], maxPoints = 200): [number, number][] {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length <= maxPoints) return sorted.map((value, index) => [value, (index + 1) / sorted.length]);
  return Array.from({ length: maxPoints }, (_, index) => {
    const fraction = (index + 1) / maxPoints;
    return [percentile(sorted, 100 * fraction), fraction];
  });
}

/** Successful requests' TTFTs of a policy at a sweep point, pooled over seeds. */
export function ttftsAt(results: ScenarioResults, pointIndex: number, policy: string): number[] {
  const runs = results.points[pointIndex]?.policies.find((entry) => entry.policy === policy)?.runs ?? [];
  return runs.flatMap((run) =>
    run.requests.flatMap((request) =>
      request.status >= 200 && request.status < 300 && request.ttftMs !== undefined ? [request.ttftMs] : [],
    ),
  );
}

/** TTFT CDF per policy at one sweep point (default: the last), seeds pooled. */
export function ttftCdfChart(
  results: ScenarioResults,
  pointIndex = results.points.length - 1,
  maxPoints = 200,
): string {
  const policies = policyOrder(results.points);
  const colors = policyColors(policies);
  const point = results.points[pointIndex];
  const series = policies.map(
    (policy): LineSeries => ({
      label: policy,
      color: colors.get(policy) as string,
      dashed: policy === ORACLE_POLICY,
      points: cdfPoints(ttftsAt(results, pointIndex, policy), maxPoints),
    }),
  );
  const title = `TTFT CDF at ${results.sweepVariable} = ${point ? point.value : '–'}`;
  return lineChart({ title, xLabel: 'TTFT (ms)', yLabel: 'fraction of requests', series, yDomain: [0, 1] });
}

function htmlTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const head = `<tr>${header.map((cell) => `<th>${escapeXml(cell)}</th>`).join('')}</tr>`;
  const body = rows.map((row) => `<tr>${row.map((cell) => `<td>${escapeXml(cell)}</td>`).join('')}</tr>`).join('\n');
  return `<table>\n<thead>${head}</thead>\n<tbody>\n${body}\n</tbody>\n</table>`;
}

const STYLE =
  `body{font-family:system-ui,sans-serif;margin:24px;color:#111}table{border-collapse:collapse;margin:8px ` +
  `0 24px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}th:first-child,td:first-child{text-align:left}figure{margin:12px ` +
  `0}`;

/** One self-contained HTML page: four charts (TTFT p50, TTFT p95, hit %, TTFT CDF) and the tables. */
export function htmlReport(results: ScenarioResults, summary: ReportSummary = summarize(results)): string {
  const charts = [
    ttftSweepChart(summary, 'ttftP50Ms'),
    ttftSweepChart(summary, 'ttftP95Ms'),
    hitRateChart(summary),
    ttftCdfChart(results),
  ];
  const tables = summary.points.map(
    (point) =>
      `<h2>${escapeXml(summary.sweepVariable)} = ${point.value}</h2>\n${htmlTable(POINT_COLUMNS, pointTableRows(point))}`,
  );
  const slopeHeader = [
    'policy',
    `TTFT p50 ms per ${summary.sweepVariable}`,
    `TTFT p95 ms per ${summary.sweepVariable}`,
    `e2e p50 ms per ${summary.sweepVariable}`,
  ];
  const slopeRows = summary.slopes.map((slope) => [
    slope.policy,
    ...[slope.ttftP50MsPerUnit, slope.ttftP95MsPerUnit, slope.e2eP50MsPerUnit].map((value) => value?.toFixed(2) ?? '–'),
  ]);
  return [
    '<!DOCTYPE html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    `<title>${escapeXml(`kvroute bench: ${summary.scenario}`)}</title>`,
    `<style>${STYLE}</style>`,
    '</head>',
    '<body>',
    `<h1>${escapeXml(summary.scenario)}</h1>`,
    '<p>Mean over seeds (tables: mean ± sample stddev). Hit % from cached ÷ prompt tokens, else from the backends’ prefix-cache counters. ' +
      '<code>oracle</code> (largest true hit, greedy and load-blind) is a reference, not an upper bound: other policies can exceed it. ' +
      '<code>bound</code> is the compulsory-miss bound: the same requests replayed one by one through ' +
      'one vllm-sim whose cache never evicts, so only blocks no earlier request had miss; no placement ' +
      'can beat it. ' +
      'Precision = confirmed ÷ predicted tokens, recall = confirmed ÷ engine-reported cached tokens, ' +
      'unverified = predictions the engine could not check (the routers’ own counters; – for the ' +
      'bench-side oracles).</p>',
    ...charts.map((chart) => `<figure>${chart}</figure>`),
    ...tables,
    // A slope needs two sweep points.
    ...(summary.points.length > 1
      ? [
          `<h2>TTFT slope, ${escapeXml(summary.sweepVariable)} ${escapeXml(span(summary))}</h2>`,
          htmlTable(slopeHeader, slopeRows),
        ]
      : []),
    '</body>',
    '</html>',
    '',
  ].join('\n');
}
