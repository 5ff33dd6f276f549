import { percentile } from '@kvroute/workloads';

/**
 * bench:pd's figures (issue 32, acceptance 1): per workload and way of serving it, over seeds. Pure: the runner
 * (pd.ts) measures, this summarises and renders.
 */
export type PdVariant = 'aggregated' | 'disaggregated' | 'cache-blind';

export const PD_VARIANTS: readonly PdVariant[] = ['aggregated', 'disaggregated', 'cache-blind'];

export const PD_VARIANT_LABELS: Readonly<Record<PdVariant, string>> = {
  aggregated: 'aggregated (4 × both)',
  disaggregated: 'disaggregated, cache-aware prefill (2 P + 2 D)',
  'cache-blind': 'disaggregated, cache-blind prefill (leastloaded)',
};

/** One streamed request as the client saw it. */
export interface PdSample {
  readonly ok: boolean;
  readonly ttftMs: number;
  /** Gaps between consecutive content events, ms. */
  readonly gapsMs: readonly number[];
  readonly outputTokens: number;
  /** Whether the router split it (X-Router-Prefill-Backend). */
  readonly disaggregated: boolean;
}

/** Prefix-cache hits ÷ queries, tokens, of a set of engines over the run (null: no engine of that kind). */
export interface KvHit {
  readonly prefill: number | null;
  readonly decode: number | null;
}

/** One run: a workload, a variant, a seed. */
export interface PdRun {
  readonly workload: string;
  readonly variant: PdVariant;
  readonly seed: number;
  readonly samples: readonly PdSample[];
  readonly wallMs: number;
  readonly kvHit: KvHit;
}

export interface PdFigures {
  readonly requests: number;
  readonly failed: number;
  readonly split: number;
  readonly ttftP50: number;
  readonly ttftP95: number;
  readonly itlP50: number;
  readonly itlP95: number;
  /** Output tokens per second of wall time. */
  readonly throughput: number;
  readonly kvHit: KvHit;
}

export function figuresOfRun(run: PdRun): PdFigures {
  const ok = run.samples.filter((sample) => sample.ok);
  const gaps = ok.flatMap((sample) => sample.gapsMs);
  return {
    requests: run.samples.length,
    failed: run.samples.length - ok.length,
    split: ok.filter((sample) => sample.disaggregated).length,
    ttftP50: percentile(
      ok.map((sample) => sample.ttftMs),
      50,
    ),
    ttftP95: percentile(
      ok.map((sample) => sample.ttftMs),
      95,
    ),
    itlP50: percentile(gaps, 50),
    itlP95: percentile(gaps, 95),
    throughput: ok.reduce((sum, sample) => sum + sample.outputTokens, 0) / (run.wallMs / 1000),
    kvHit: run.kvHit,
  };
}

const mean = (values: readonly number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length;

/** The mean of each figure over `runs` (one workload and variant, several seeds). */
export function meanFigures(runs: readonly PdRun[]): PdFigures {
  const each = runs.map(figuresOfRun);
  const meanOf = (pick: (figures: PdFigures) => number | null): number | null => {
    const values = each.map(pick).filter((value): value is number => value !== null && Number.isFinite(value));
    return values.length === 0 ? null : mean(values);
  };
  return {
    requests: each.reduce((sum, figures) => sum + figures.requests, 0),
    failed: each.reduce((sum, figures) => sum + figures.failed, 0),
    split: each.reduce((sum, figures) => sum + figures.split, 0),
    ttftP50: meanOf((figures) => figures.ttftP50) ?? Number.NaN,
    ttftP95: meanOf((figures) => figures.ttftP95) ?? Number.NaN,
    itlP50: meanOf((figures) => figures.itlP50) ?? Number.NaN,
    itlP95: meanOf((figures) => figures.itlP95) ?? Number.NaN,
    throughput: meanOf((figures) => figures.throughput) ?? Number.NaN,
    kvHit: { prefill: meanOf((figures) => figures.kvHit.prefill), decode: meanOf((figures) => figures.kvHit.decode) },
  };
}

const ms = (value: number): string => (Number.isFinite(value) ? `${Math.round(value)} ms` : '–');
const percent = (value: number | null): string => (value === null ? '–' : `${(100 * value).toFixed(1)} %`);

/** One table per workload: a row per variant, means over the seeds run. */
export function renderPdTables(runs: readonly PdRun[]): string {
  const workloads = [...new Set(runs.map((run) => run.workload))];
  const seeds = [...new Set(runs.map((run) => run.seed))];
  const lines: string[] = [];
  for (const workload of workloads) {
    lines.push(
      `### ${workload} (mean of ${seeds.length} seed${seeds.length === 1 ? '' : 's'})`,
      '',
      '| serving | requests | failed | split | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 | tokens/s | KV hit prefill | KV hit decode |',
      '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    );
    for (const variant of PD_VARIANTS) {
      const mine = runs.filter((run) => run.workload === workload && run.variant === variant);
      if (mine.length === 0) continue;
      const figures = meanFigures(mine);
      lines.push(
        `| ${PD_VARIANT_LABELS[variant]} | ${figures.requests} | ${figures.failed} | ${figures.split} | ${ms(figures.ttftP50)} | ` +
          `${ms(figures.ttftP95)} | ${ms(figures.itlP50)} | ${ms(figures.itlP95)} | ${figures.throughput.toFixed(1)} | ` +
          `${percent(figures.kvHit.prefill)} | ${percent(figures.kvHit.decode)} |`,
      );
    }
    lines.push('');
  }
  return lines.join('\n');
}

export interface PdCheck {
  readonly name: string;
  readonly passed: boolean;
  readonly measured: string;
}

/** The change from `blind` to `aware`, as a signed percentage (a cut is −). */
function change(aware: number, blind: number): string {
  const percent = 100 * (aware / blind - 1);
  return `${percent <= 0 ? '−' : '+'}${Math.abs(percent).toFixed(1)} %`;
}

/**
 * Acceptance 1: the cache-aware prefill choice beats the cache-blind one on TTFT p50 by ≥ 30 %, judged on the mean over
 * seeds; each seed's own figures are listed beside it.
 */
export function cacheAwareCheck(runs: readonly PdRun[], workload: string): PdCheck {
  const of = (variant: PdVariant, seed?: number) =>
    runs.filter(
      (run) => run.workload === workload && run.variant === variant && (seed === undefined || run.seed === seed),
    );
  const aware = meanFigures(of('disaggregated')).ttftP50;
  const blind = meanFigures(of('cache-blind')).ttftP50;
  const gain = 1 - aware / blind;
  const seeds = [...new Set(of('disaggregated').map((run) => run.seed))].sort((a, b) => a - b);
  const perSeed = seeds.map((seed) => {
    const seedAware = meanFigures(of('disaggregated', seed)).ttftP50;
    const seedBlind = meanFigures(of('cache-blind', seed)).ttftP50;
    return `seed ${seed}: ${ms(seedAware)} vs ${ms(seedBlind)} (${change(seedAware, seedBlind)})`;
  });
  return {
    name: `${workload}: cache-aware prefill choice cuts TTFT p50 by ≥ 30 % against cache-blind`,
    passed: Number.isFinite(gain) && gain >= 0.3,
    measured: `${ms(aware)} vs ${ms(blind)} (${change(aware, blind)}); ${perSeed.join('; ')}`,
  };
}
