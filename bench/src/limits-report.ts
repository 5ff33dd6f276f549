/**
 * Pure part of the tenant-limits benchmark (limits.ts): what was served in each window of the run,
 * against each key's limit, the checks of issue 14's acceptance 2, and their markdown rendering.
 *
 * Windows: the limits are GCRA buckets whose burst is one period's worth (a key limited to 600/min may
 * send 600 at once, then 10/s), so a window that starts with the run would count the burst as well as
 * the rate. Each window therefore starts after a settling time, once the burst is spent (the burst is
 * shown on its own line), and measures the steady rate that the limit promises.
 */

/** One finished request as the client saw it. */
export interface LimitSample {
  /** Which load: the key limited by requests per minute, or the key limited by tokens per minute. */
  readonly load: LoadId;
  /** When the response ended, ms since the run started. */
  readonly atMs: number;
  /** HTTP status, or 0 when the request failed without one (connection refused, reset, timeout). */
  readonly status: number;
  /** On a 429: whether it carried Retry-After. */
  readonly retryAfter: boolean;
  /** prompt_tokens + completion_tokens from the response's usage (0 when none). */
  readonly usageTokens: number;
}

export const LOAD_IDS = ['requests', 'tokens'] as const;
export type LoadId = (typeof LOAD_IDS)[number];

export interface LimitWindow {
  readonly name: string;
  /** What the window shows, for the table. */
  readonly description: string;
  readonly fromMs: number;
  readonly toMs: number;
  /** False for a window shown for information only (the burst): no rate check. */
  readonly checked?: boolean;
}

export interface LoadLimits {
  /** The requests key's requests per minute. */
  readonly requestsPerMinute: number;
  /** The tokens key's tokens per minute. */
  readonly tokensPerMinute: number;
}

export interface WindowFigures {
  readonly window: string;
  readonly load: LoadId;
  readonly seconds: number;
  readonly served: number;
  readonly refused: number;
  /** Served requests per minute (requests load) or usage tokens per minute (tokens load). */
  readonly perMinute: number;
  /** perMinute ÷ the limit. */
  readonly ofLimit: number;
}

export interface LimitsSummary {
  readonly windows: readonly WindowFigures[];
  /** Over the whole run, per load. */
  readonly totals: Readonly<
    Record<
      LoadId,
      {
        served: number;
        refused: number;
        refusedWithoutRetryAfter: number;
        otherFailures: number;
        otherStatuses: Readonly<Record<string, number>>;
      }
    >
  >;
  readonly checks: readonly LimitCheck[];
}

export interface LimitCheck {
  readonly name: string;
  readonly passed: boolean;
  readonly detail: string;
}

/** The tolerance of acceptance 2: the served rate within ±5 % of the limit. */
export const RATE_TOLERANCE = 0.05;

export function summarizeLimits(
  samples: readonly LimitSample[],
  windows: readonly LimitWindow[],
  limits: LoadLimits,
  tolerance = RATE_TOLERANCE,
): LimitsSummary {
  const figures: WindowFigures[] = [];
  for (const window of windows) {
    const seconds = (window.toMs - window.fromMs) / 1_000;
    for (const load of LOAD_IDS) {
      const inWindow = samples.filter(
        (sample) => sample.load === load && sample.atMs >= window.fromMs && sample.atMs < window.toMs,
      );
      const served = inWindow.filter((sample) => sample.status === 200);
      const amount = load === 'requests' ? served.length : served.reduce((sum, sample) => sum + sample.usageTokens, 0);
      const perMinute = seconds > 0 ? (amount * 60) / seconds : 0;
      const limit = load === 'requests' ? limits.requestsPerMinute : limits.tokensPerMinute;
      figures.push({
        window: window.name,
        load,
        seconds,
        served: served.length,
        refused: inWindow.filter((sample) => sample.status === 429).length,
        perMinute,
        ofLimit: perMinute / limit,
      });
    }
  }
  const totals = Object.fromEntries(
    LOAD_IDS.map((load) => {
      const mine = samples.filter((sample) => sample.load === load);
      const other = mine.filter((sample) => sample.status !== 200 && sample.status !== 429);
      const otherStatuses: Record<string, number> = {};
      for (const sample of other)
        otherStatuses[String(sample.status)] = (otherStatuses[String(sample.status)] ?? 0) + 1;
      return [
        load,
        {
          served: mine.filter((sample) => sample.status === 200).length,
          refused: mine.filter((sample) => sample.status === 429).length,
          refusedWithoutRetryAfter: mine.filter((sample) => sample.status === 429 && !sample.retryAfter).length,
          otherFailures: other.length,
          otherStatuses,
        },
      ];
    }),
  ) as LimitsSummary['totals'];

  const checks: LimitCheck[] = [];
  for (const figure of figures) {
    if (figure.seconds <= 0 || windows.find((window) => window.name === figure.window)?.checked === false) continue;
    const within = Math.abs(figure.ofLimit - 1) <= tolerance;
    const unit = figure.load === 'requests' ? 'requests/min' : 'tokens/min';
    checks.push({
      name: `${figure.window}: ${unit} within ±${Math.round(tolerance * 100)} % of the limit`,
      passed: within,
      detail: `${formatNumber(figure.perMinute)} ${unit} = ${formatPercent(figure.ofLimit)} of the limit`,
    });
  }
  for (const load of LOAD_IDS) {
    const total = totals[load];
    checks.push({
      name: `${load} key: every 429 carries Retry-After`,
      passed: total.refusedWithoutRetryAfter === 0 && total.refused > 0,
      detail:
        `${total.refused} refused, ${total.refusedWithoutRetryAfter} without Retry-After` +
        (total.refused === 0 ? ' (no 429 at all: the load never reached the limit)' : ''),
    });
    checks.push({
      name: `${load} key: no request failed for another reason`,
      passed: total.otherFailures === 0,
      detail:
        total.otherFailures === 0
          ? 'none'
          : Object.entries(total.otherStatuses)
              .map(([status, count]) => `${count} × ${status === '0' ? 'no response' : status}`)
              .join(', '),
    });
  }
  return { windows: figures, totals, checks };
}

/** Per-second served requests or usage tokens of one load (for the chart), seconds since the run started. */
export function perSecond(samples: readonly LimitSample[], load: LoadId, untilMs: number): [number, number][] {
  const buckets = new Array<number>(Math.ceil(untilMs / 1_000)).fill(0);
  for (const sample of samples) {
    if (sample.load !== load || sample.status !== 200 || sample.atMs < 0 || sample.atMs >= untilMs) continue;
    const index = Math.floor(sample.atMs / 1_000);
    buckets[index] = (buckets[index] ?? 0) + (load === 'requests' ? 1 : sample.usageTokens);
  }
  return buckets.map((value, index) => [index + 0.5, value]);
}

export function renderLimitsMarkdown(
  summary: LimitsSummary,
  windows: readonly LimitWindow[],
  limits: LoadLimits,
  header: readonly string[],
): string {
  const lines = [
    ...header,
    '',
    '| window | what it shows | load | seconds | served | 429s | per minute | of the limit |',
    '|---|---|---|---:|---:|---:|---:|---:|',
  ];
  for (const figure of summary.windows) {
    const window = windows.find((candidate) => candidate.name === figure.window);
    const unit =
      figure.load === 'requests'
        ? `requests (limit ${formatNumber(limits.requestsPerMinute)}/min)`
        : `tokens (limit ${formatNumber(limits.tokensPerMinute)}/min)`;
    lines.push(
      `| ${figure.window} | ${window?.description ?? ''} | ${unit} | ${figure.seconds.toFixed(0)} ` +
        `| ${figure.served} | ${figure.refused} | ${formatNumber(figure.perMinute)} | ${formatPercent(figure.ofLimit)} ` +
        `|`,
    );
  }
  lines.push('', '| check | result | detail |', '|---|---|---|');
  for (const check of summary.checks)
    lines.push(`| ${check.name} | ${check.passed ? 'pass' : '**FAIL**'} | ${check.detail} |`);
  return `${lines.join('\n')}\n`;
}

function formatNumber(value: number): string {
  return value >= 100 ? Math.round(value).toLocaleString('en-US') : value.toFixed(1);
}

function formatPercent(ratio: number): string {
  return `${(ratio * 100).toFixed(1)} %`;
}
