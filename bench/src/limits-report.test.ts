import { describe, expect, it } from 'vitest';
import { perSecond, renderLimitsMarkdown, summarizeLimits, type LimitSample, type LimitWindow } from './limits-report';

const windows: LimitWindow[] = [
  { name: 'burst', description: 'burst', fromMs: 0, toMs: 1_000, checked: false },
  { name: 'shared', description: 'Redis up', fromMs: 1_000, toMs: 61_000 },
];
const limits = { requestsPerMinute: 600, tokensPerMinute: 30_000 };

/** `count` samples of one load spread evenly over [fromMs, toMs). */
function spread(
  load: LimitSample['load'],
  count: number,
  fromMs: number,
  toMs: number,
  fields: Partial<LimitSample> = {},
): LimitSample[] {
  return Array.from({ length: count }, (_, index) => ({
    load,
    atMs: fromMs + ((toMs - fromMs) * index) / count,
    status: 200,
    retryAfter: false,
    usageTokens: load === 'tokens' ? 250 : 20,
    ...fields,
  }));
}

describe('summarizeLimits', () => {
  it('measures each window as a rate per minute against the limit, requests by count and tokens by usage', () => {
    const samples = [
      ...spread('requests', 400, 0, 1_000),
      ...spread('requests', 610, 1_000, 61_000),
      ...spread('requests', 3_000, 1_000, 61_000, { status: 429, retryAfter: true }),
      ...spread('tokens', 116, 1_000, 61_000),
      ...spread('tokens', 50, 1_000, 61_000, { status: 429, retryAfter: true }),
    ];
    const summary = summarizeLimits(samples, windows, limits);
    const shared = summary.windows.filter((figure) => figure.window === 'shared');
    expect(shared.find((figure) => figure.load === 'requests')).toMatchObject({
      served: 610,
      refused: 3_000,
      perMinute: 610,
    });
    expect(shared.find((figure) => figure.load === 'tokens')?.perMinute).toBe(116 * 250);
    // The burst window is shown, never checked: 400 in a second is the bucket's burst, not a broken limit.
    expect(summary.windows.find((figure) => figure.window === 'burst' && figure.load === 'requests')?.served).toBe(400);
    expect(summary.checks.some((check) => check.name.startsWith('burst'))).toBe(false);
    expect(summary.checks.every((check) => check.passed)).toBe(true);
  });

  it('fails a rate outside ±5 %, a 429 without Retry-After, any other failure, and a load that was never refused', () => {
    const samples = [
      ...spread('requests', 640, 1_000, 61_000),
      ...spread('requests', 10, 1_000, 61_000, { status: 429, retryAfter: false }),
      ...spread('requests', 2, 1_000, 61_000, { status: 503 }),
      ...spread('requests', 1, 1_000, 61_000, { status: 0 }),
      ...spread('tokens', 120, 1_000, 61_000),
    ];
    const summary = summarizeLimits(samples, windows, limits);
    const failed = summary.checks.filter((check) => !check.passed).map((check) => check.name);
    expect(failed).toEqual([
      'shared: requests/min within ±5 % of the limit',
      'requests key: every 429 carries Retry-After',
      'requests key: no request failed for another reason',
      'tokens key: every 429 carries Retry-After',
    ]);
    expect(summary.totals.requests.otherStatuses).toEqual({ '0': 1, '503': 2 });
    expect(
      summary.checks.find((check) => check.name === 'requests key: no request failed for another reason')?.detail,
    ).toBe('1 × no response, 2 × 503');
    expect(
      summary.checks.find((check) => check.name === 'tokens key: every 429 carries Retry-After')?.detail,
    ).toContain('never reached the limit');
  });

  it('renders both tables', () => {
    const samples = [...spread('requests', 600, 1_000, 61_000), ...spread('tokens', 120, 1_000, 61_000)];
    const markdown = renderLimitsMarkdown(summarizeLimits(samples, windows, limits), windows, limits, ['# run']);
    expect(markdown).toContain('| shared | Redis up | requests (limit 600/min) | 60 | 600 | 0 | 600 | 100.0 % |');
    expect(markdown).toContain(
      '| shared: tokens/min within ±5 % of the limit | pass | 30,000 tokens/min = 100.0 % of the limit |',
    );
    expect(markdown).toContain('**FAIL**');
  });
});

describe('perSecond', () => {
  it('buckets served requests or usage tokens by second, refusals left out', () => {
    const samples: LimitSample[] = [
      { load: 'tokens', atMs: 100, status: 200, retryAfter: false, usageTokens: 200 },
      { load: 'tokens', atMs: 900, status: 200, retryAfter: false, usageTokens: 50 },
      { load: 'tokens', atMs: 1_500, status: 429, retryAfter: true, usageTokens: 0 },
      { load: 'requests', atMs: 1_500, status: 200, retryAfter: false, usageTokens: 20 },
    ];
    expect(perSecond(samples, 'tokens', 2_000)).toEqual([
      [0.5, 250],
      [1.5, 0],
    ]);
    expect(perSecond(samples, 'requests', 2_000)).toEqual([
      [0.5, 0],
      [1.5, 1],
    ]);
  });
});
