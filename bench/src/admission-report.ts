/**
 * The admission benchmark's arithmetic (bench/src/admission.ts; issue 30, acceptances 1 and 2): each
 * window's figures per tenant, the checks the issue sets, and the Markdown table. Pure: samples in,
 * figures out, so it is tested without processes.
 */

/** Who sent a request: the noisy tenant, the steady one, or the overload scenario's single load. */
export type AdmissionLoad = 'noisy' | 'steady' | 'load';

/** One request as the benchmark recorded it. */
export interface AdmissionSample {
  readonly load: AdmissionLoad;
  /** The window it was sent in. */
  readonly window: string;
  /** Sent at, ms since the run started. */
  readonly atMs: number;
  /** HTTP status; 0 for a transport error. */
  readonly status: number;
  /** First output event, ms after sending (streamed requests that succeeded). */
  readonly ttftMs?: number;
  /** Response end (or the error's arrival), ms after sending. */
  readonly e2eMs: number;
  /** Engine tokens it used (usage: prompt + completion), 0 unless served. */
  readonly tokens: number;
  /** A 429 that carried Retry-After. */
  readonly retryAfter: boolean;
}

/** One load's figures in one window. */
export interface LoadFigures {
  readonly sent: number;
  readonly served: number;
  /** 429 answers. */
  readonly shed: number;
  /** Anything else that was not a 200 (5xx, transport errors). */
  readonly failed: number;
  readonly ttftP50Ms: number | null;
  readonly ttftP99Ms: number | null;
  /** The slowest 429's answer time and its p99, ms. */
  readonly shedMaxMs: number | null;
  readonly shedP99Ms: number | null;
  /** 429s without Retry-After. */
  readonly shedWithoutRetryAfter: number;
  readonly tokens: number;
}

/** Nearest-rank percentile of `values` (unsorted), or null when empty. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] as number;
}

export function figuresOf(samples: readonly AdmissionSample[]): LoadFigures {
  const served = samples.filter((sample) => sample.status === 200);
  const shed = samples.filter((sample) => sample.status === 429);
  const ttfts = served.flatMap((sample) => (sample.ttftMs === undefined ? [] : [sample.ttftMs]));
  const shedTimes = shed.map((sample) => sample.e2eMs);
  return {
    sent: samples.length,
    served: served.length,
    shed: shed.length,
    failed: samples.length - served.length - shed.length,
    ttftP50Ms: percentile(ttfts, 50),
    ttftP99Ms: percentile(ttfts, 99),
    shedMaxMs: shedTimes.length === 0 ? null : Math.max(...shedTimes),
    shedP99Ms: percentile(shedTimes, 99),
    shedWithoutRetryAfter: shed.filter((sample) => !sample.retryAfter).length,
    tokens: served.reduce((sum, sample) => sum + sample.tokens, 0),
  };
}

/** Every (window, load) pair present in `samples`, in the order the windows are given. */
export function figuresByWindow(
  samples: readonly AdmissionSample[],
  windows: readonly string[],
): Map<string, Map<AdmissionLoad, LoadFigures>> {
  const table = new Map<string, Map<AdmissionLoad, LoadFigures>>();
  for (const window of windows) {
    const inWindow = samples.filter((sample) => sample.window === window);
    const loads = [...new Set(inWindow.map((sample) => sample.load))];
    table.set(window, new Map(loads.map((load) => [load, figuresOf(inWindow.filter((s) => s.load === load))])));
  }
  return table;
}

/**
 * The noisy tenant's fair share of the engines' tokens, 0–1: its weight's share, or more when the
 * steady tenant asks for less than its own (max-min fairness: what one tenant leaves, the other may take).
 */
export function fairShare(noisyWeight: number, steadyWeight: number, steadyDemandShare: number): number {
  const weighted = noisyWeight / (noisyWeight + steadyWeight);
  return Math.max(weighted, 1 - Math.min(steadyDemandShare, 1 - weighted));
}

/**
 * The steady tenant's demand as a share of what the pool served in the window, 0–1: the requests it sent
 * (served or not) at the tokens its served ones used, over every tenant's served tokens. Poisson arrivals
 * make a window's demand differ from the nominal rate; fairness is judged against what was asked.
 */
export function demandShare(steady: LoadFigures, allServedTokens: number): number {
  if (steady.served === 0 || allServedTokens === 0) return 0;
  return Math.min(1, (steady.sent * (steady.tokens / steady.served)) / allServedTokens);
}

export interface AdmissionCheck {
  readonly name: string;
  readonly passed: boolean;
  readonly detail: string;
}

const ms = (value: number | null): string => (value === null ? '–' : `${Math.round(value)} ms`);

/** The noisy-neighbour checks (acceptance 1) on the steady tenant alone and both under flow control. */
export function noisyNeighbourChecks(input: {
  readonly alone: LoadFigures;
  readonly contended: { readonly noisy: LoadFigures; readonly steady: LoadFigures };
  readonly noisyFairShare: number;
}): AdmissionCheck[] {
  const { alone, contended, noisyFairShare } = input;
  const ratio =
    alone.ttftP99Ms === null || contended.steady.ttftP99Ms === null
      ? null
      : contended.steady.ttftP99Ms / alone.ttftP99Ms;
  const total = contended.noisy.tokens + contended.steady.tokens;
  const share = total === 0 ? null : contended.noisy.tokens / total;
  const deviation = share === null ? null : Math.abs(share - noisyFairShare) / noisyFairShare;
  return [
    {
      name: 'steady tenant TTFT p99 ≤ 1.25 × alone',
      passed: ratio !== null && ratio <= 1.25,
      detail: `${ms(contended.steady.ttftP99Ms)} vs ${ms(alone.ttftP99Ms)} alone (×${ratio?.toFixed(2) ?? '–'})`,
    },
    {
      name: 'noisy tenant’s share of engine tokens within ±10 % of its fair share',
      passed: deviation !== null && deviation <= 0.1,
      detail: `${share === null ? '–' : (share * 100).toFixed(1)} % vs ${(noisyFairShare * 100).toFixed(1)} % fair`,
    },
    {
      name: 'the steady tenant is never shed',
      passed: contended.steady.shed === 0 && contended.steady.failed === 0,
      detail: `${contended.steady.shed} × 429, ${contended.steady.failed} failed`,
    },
  ];
}

/** The overload checks (acceptance 2) on the flow-controlled window against the unloaded one. */
export function overloadChecks(input: {
  readonly unloaded: LoadFigures;
  readonly overloaded: LoadFigures;
  /** Queue waits past the deadline the routers counted (their histogram), and the largest queue sampled. */
  readonly waitsPastDeadline: number;
  readonly maxQueued: number;
  readonly queueBound: number;
}): AdmissionCheck[] {
  const { unloaded, overloaded } = input;
  const ratio =
    unloaded.ttftP99Ms === null || overloaded.ttftP99Ms === null ? null : overloaded.ttftP99Ms / unloaded.ttftP99Ms;
  return [
    {
      name: 'admitted requests’ TTFT p99 ≤ 1.5 × unloaded',
      passed: ratio !== null && ratio <= 1.5,
      detail: `${ms(overloaded.ttftP99Ms)} vs ${ms(unloaded.ttftP99Ms)} unloaded (×${ratio?.toFixed(2) ?? '–'})`,
    },
    {
      name: 'no admitted request waited past its deadline',
      passed: input.waitsPastDeadline === 0,
      detail: `${input.waitsPastDeadline} queue waits past the deadline`,
    },
    {
      name: 'the queue stays within its bound',
      passed: input.maxQueued <= input.queueBound,
      detail: `largest queue seen ${input.maxQueued} (bound ${input.queueBound} per replica)`,
    },
    {
      name: 'shed requests get 429 + Retry-After within 10 ms',
      passed:
        overloaded.shed > 0 &&
        overloaded.shedWithoutRetryAfter === 0 &&
        overloaded.shedP99Ms !== null &&
        overloaded.shedP99Ms <= 10,
      detail:
        `${overloaded.shed} shed, p99 ${overloaded.shedP99Ms?.toFixed(1) ?? '–'} ms, max ` +
        `${overloaded.shedMaxMs?.toFixed(1) ?? '–'} ms, ${overloaded.shedWithoutRetryAfter} without Retry-After`,
    },
    {
      name: 'nothing failed other than by 429',
      passed: overloaded.failed === 0,
      detail: `${overloaded.failed} failed`,
    },
  ];
}

/** One row per (window, load): what was sent, served, shed, TTFT, tokens and the load's token share. */
export function renderWindowTable(
  table: ReadonlyMap<string, ReadonlyMap<AdmissionLoad, LoadFigures>>,
  describe: (window: string) => string,
): string {
  const lines = [
    '| window | load | sent | served | 429 | failed | TTFT p50 | TTFT p99 | 429 answer p99 | engine tokens | token share |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [window, loads] of table) {
    const total = [...loads.values()].reduce((sum, figures) => sum + figures.tokens, 0);
    for (const [load, figures] of loads) {
      const share = total === 0 ? '–' : `${((figures.tokens / total) * 100).toFixed(1)} %`;
      lines.push(
        `| ${describe(window)} | ${load} | ${figures.sent} | ${figures.served} | ${figures.shed} | ${figures.failed} | ` +
          `${ms(figures.ttftP50Ms)} | ${ms(figures.ttftP99Ms)} | ${figures.shedP99Ms?.toFixed(1) ?? '–'} ms | ` +
          `${figures.tokens} | ${share} |`,
      );
    }
  }
  return lines.join('\n');
}

export function renderChecks(checks: readonly AdmissionCheck[]): string {
  return [
    '| check | result | measured |',
    '|---|---|---|',
    ...checks.map((check) => `| ${check.name} | ${check.passed ? 'pass' : '**FAIL**'} | ${check.detail} |`),
  ].join('\n');
}
