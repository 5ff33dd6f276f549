import { percentile } from '@kvroute/workloads';

/**
 * bench:lora's figures (issue 33, acceptance 1): per way of routing, over seeds. Pure: the runner (lora.ts) measures,
 * this summarises and renders.
 */
export type LoraVariant = 'adapter-aware' | 'adapter-blind' | 'leastloaded';

export const LORA_VARIANTS: readonly LoraVariant[] = ['adapter-aware', 'adapter-blind', 'leastloaded'];

export const LORA_VARIANT_LABELS: Readonly<Record<LoraVariant, string>> = {
  'adapter-aware': 'cacheaware, adapter-aware',
  'adapter-blind': 'cacheaware, adapter-blind (an adapter is a model)',
  leastloaded: 'leastloaded (adapter-blind)',
};

/** One streamed request as the client saw it. */
export interface LoraSample {
  readonly ok: boolean;
  readonly ttftMs: number;
  readonly adapter: string;
}

/** One run: a variant, a seed. */
export interface LoraRun {
  readonly variant: LoraVariant;
  readonly seed: number;
  readonly samples: readonly LoraSample[];
  readonly wallMs: number;
  /** Adapter loads the engines made during the run (the sims' `kvroute_sim_lora_loads_total`, after minus before). */
  readonly adapterLoads: number;
  /** Prefix-cache hits ÷ queries over the engines, tokens. */
  readonly kvHit: number;
}

export interface LoraFigures {
  readonly requests: number;
  readonly failed: number;
  readonly ttftP50: number;
  readonly ttftP95: number;
  readonly loadsPer1000: number;
  readonly kvHit: number;
}

export function figuresOfRun(run: LoraRun): LoraFigures {
  const ok = run.samples.filter((sample) => sample.ok);
  const ttfts = ok.map((sample) => sample.ttftMs);
  return {
    requests: run.samples.length,
    failed: run.samples.length - ok.length,
    ttftP50: percentile(ttfts, 50),
    ttftP95: percentile(ttfts, 95),
    loadsPer1000: run.samples.length === 0 ? 0 : (1000 * run.adapterLoads) / run.samples.length,
    kvHit: run.kvHit,
  };
}

/** The mean of each figure over runs (seeds). */
export function meanFigures(runs: readonly LoraRun[]): LoraFigures {
  const figures = runs.map(figuresOfRun);
  const mean = (pick: (each: LoraFigures) => number): number =>
    figures.length === 0 ? 0 : figures.reduce((sum, each) => sum + pick(each), 0) / figures.length;
  return {
    requests: figures.reduce((sum, each) => sum + each.requests, 0),
    failed: figures.reduce((sum, each) => sum + each.failed, 0),
    ttftP50: mean((each) => each.ttftP50),
    ttftP95: mean((each) => each.ttftP95),
    loadsPer1000: mean((each) => each.loadsPer1000),
    kvHit: mean((each) => each.kvHit),
  };
}

export interface LoraCheck {
  readonly name: string;
  readonly passed: boolean;
  readonly measured: string;
}

/** Relative change of `after` against `before`, percent (negative: smaller). */
function changePercent(before: number, after: number): number {
  return before === 0 ? 0 : (100 * (after - before)) / before;
}

/**
 * Acceptance 1: adapter-aware cuts adapter loads by ≥ 50 % and TTFT p95 by ≥ 30 % against adapter-blind, on the means
 * over seeds (each seed's figures shown too).
 */
export function adapterAwareChecks(runs: readonly LoraRun[]): LoraCheck[] {
  const of = (variant: LoraVariant) => runs.filter((run) => run.variant === variant);
  const aware = meanFigures(of('adapter-aware'));
  const blind = meanFigures(of('adapter-blind'));
  const perSeed = (pick: (figures: LoraFigures) => number): string =>
    [...new Set(runs.map((run) => run.seed))]
      .map((seed) => {
        const [a] = of('adapter-aware').filter((run) => run.seed === seed);
        const [b] = of('adapter-blind').filter((run) => run.seed === seed);
        if (a === undefined || b === undefined) return `seed ${seed}: –`;
        return `seed ${seed}: ${signed(changePercent(pick(figuresOfRun(b)), pick(figuresOfRun(a))))}`;
      })
      .join(', ');
  const loads = changePercent(blind.loadsPer1000, aware.loadsPer1000);
  const p95 = changePercent(blind.ttftP95, aware.ttftP95);
  return [
    {
      name: 'adapter loads, adapter-aware vs adapter-blind: ≤ −50 %',
      passed: loads <= -50,
      measured: `${aware.loadsPer1000.toFixed(1)} vs ${blind.loadsPer1000.toFixed(1)} per 1,000 requests (${signed(loads)}; ${perSeed((f) => f.loadsPer1000)})`,
    },
    {
      name: 'TTFT p95, adapter-aware vs adapter-blind: ≤ −30 %',
      passed: p95 <= -30,
      measured: `${aware.ttftP95.toFixed(0)} vs ${blind.ttftP95.toFixed(0)} ms (${signed(p95)}; ${perSeed((f) => f.ttftP95)})`,
    },
  ];
}

function signed(percent: number): string {
  return `${percent > 0 ? '+' : ''}${percent.toFixed(1)} %`;
}

/** The results tables: means over seeds per variant, then each run. */
export function renderLoraTables(runs: readonly LoraRun[]): string {
  const row = (label: string, f: LoraFigures): string =>
    `| ${label} | ${f.requests} | ${f.failed} | ${f.ttftP50.toFixed(0)} | ${f.ttftP95.toFixed(0)} | ` +
    `${f.loadsPer1000.toFixed(1)} | ${(100 * f.kvHit).toFixed(1)} % |`;
  const header = [
    '| routing | requests | failed | TTFT p50 ms | TTFT p95 ms | adapter loads / 1,000 requests | KV hit |',
    '|---|---|---|---|---|---|---|',
  ];
  const means = LORA_VARIANTS.filter((variant) => runs.some((run) => run.variant === variant)).map((variant) =>
    row(LORA_VARIANT_LABELS[variant], meanFigures(runs.filter((run) => run.variant === variant))),
  );
  const each = runs.map((run) => row(`${run.variant}, seed ${run.seed}`, figuresOfRun(run)));
  return ['Means over seeds:', '', ...header, ...means, '', 'Per run:', '', ...header, ...each, ''].join('\n');
}

/**
 * A Zipf sampler over `count` ranks (0 = most popular): rank r drawn with probability ∝ 1 / (r + 1)^exponent, by
 * inverting the cumulative weights with `random` (one draw per sample).
 */
export function zipfSampler(count: number, exponent: number, random: () => number): () => number {
  const weights = Array.from({ length: count }, (_, rank) => 1 / (rank + 1) ** exponent);
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  const cumulative: number[] = [];
  let running = 0;
  for (const weight of weights) {
    running += weight / total;
    cumulative.push(running);
  }
  return () => {
    const draw = random();
    const rank = cumulative.findIndex((bound) => draw < bound);
    return rank === -1 ? count - 1 : rank;
  };
}
