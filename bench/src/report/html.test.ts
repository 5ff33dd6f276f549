import { describe, expect, it } from 'vitest';
import { FIXTURE } from './test-fixture';
import { cdfPoints, hitRateChart, htmlReport, ttftCdfChart, ttftSweepChart } from './html';
import { summarize } from './summary';
import { escapeXml, niceDomain, niceTicks } from './svg';

const summary = summarize(FIXTURE);

const VOID = new Set(['meta', '!doctype']);

/** Tags balance (self-closing and void elements aside): the page is well-formed enough to parse. */
function assertBalanced(markup: string): void {
  const stack: string[] = [];
  for (const match of markup.matchAll(/<(\/?)(!?[a-zA-Z]+)[^>]*?(\/?)>/g)) {
    const [, closing, rawName, selfClosing] = match;
    const name = rawName!.toLowerCase();
    if (selfClosing || VOID.has(name)) continue;
    if (closing) expect(stack.pop()).toBe(name);
    else stack.push(name);
  }
  expect(stack).toEqual([]);
}

function polylines(svg: string): { series: string; points: number }[] {
  return [...svg.matchAll(/<polyline data-series="([^"]*)" points="([^"]*)"/g)].map((match) => ({
    series: match[1]!,
    points: match[2]!.split(' ').filter(Boolean).length,
  }));
}

describe('svg helpers', () => {
  it('escapes text and picks nice ticks', () => {
    expect(escapeXml(`<a href="x">&'`)).toBe('&lt;a href=&quot;x&quot;&gt;&amp;&#39;');
    expect(niceTicks(0, 100)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(niceTicks(4, 24, 5)).toEqual([5, 10, 15, 20]);
    expect(niceDomain(0, 87)).toEqual([0, 100]);
  });

  it('builds CDF points, capped by nearest-rank quantiles', () => {
    expect(cdfPoints([30, 10, 20])).toEqual([
      [10, 1 / 3],
      [20, 2 / 3],
      [30, 1],
    ]);
    const many = cdfPoints(
      Array.from({ length: 1000 }, (_, index) => index + 1),
      10,
    );
    expect(many).toHaveLength(10);
    expect(many[0]).toEqual([100, 0.1]);
    expect(many[9]).toEqual([1000, 1]);
  });
});

describe('charts', () => {
  it('TTFT vs sweep: one polyline per policy, one point per sweep point', () => {
    const chart = ttftSweepChart(summary, 'ttftP50Ms');
    expect(polylines(chart)).toEqual(
      ['roundrobin', 'leastloaded', 'cacheaware', 'oracle'].map((series) => ({ series, points: 2 })),
    );
  });

  it('hit rate: a bar per non-oracle policy and point, the oracle and the bound as lines (the bound only where its replay did not evict)', () => {
    const chart = hitRateChart(summary);
    expect(chart.match(/<rect [^>]*><title>/g)).toHaveLength(3 * 2);
    expect(polylines(chart)).toEqual([
      { series: 'oracle', points: 2 },
      // Known at one point only: a segment across that point's bars (a line through one point draws nothing).
      { series: 'bound', points: 2 },
    ]);
    expect(chart).toContain('cacheaware @ sessions = 4: 80.0 %');
    const withoutBound = hitRateChart(
      summarize({ ...FIXTURE, points: FIXTURE.points.map(({ bound: _bound, ...point }) => point) }),
    );
    expect(polylines(withoutBound).map((line) => line.series)).toEqual(['oracle']);
    expect(withoutBound).not.toContain('>bound<');
  });

  it('TTFT CDF at the last point: one point per successful request', () => {
    const chart = ttftCdfChart(FIXTURE);
    expect(chart).toContain('TTFT CDF at sessions = 8');
    expect(polylines(chart).map((line) => line.points)).toEqual([4, 4, 4, 4]);
    expect(polylines(ttftCdfChart(FIXTURE, 0)).map((line) => line.points)).toEqual([8, 4, 4, 4]);
  });
});

describe('one sweep point (the demo)', () => {
  const single: typeof FIXTURE = { ...FIXTURE, points: FIXTURE.points.slice(0, 1) };
  const html = htmlReport(single);

  it('draws every policy of the TTFT charts as a dot, and the hit chart’s reference lines across the bars', () => {
    const dots = (chart: string) => [...chart.matchAll(/<circle data-series="([^"]*)"/g)].map((match) => match[1]);
    for (const figure of ['ttftP50Ms', 'ttftP95Ms'] as const) {
      const chart = ttftSweepChart(summarize(single), figure);
      expect(polylines(chart)).toEqual([]);
      expect(dots(chart)).toEqual(['roundrobin', 'leastloaded', 'cacheaware', 'oracle']);
    }
    const hits = hitRateChart(summarize(single));
    expect(hits.match(/<rect [^>]*><title>/g)).toHaveLength(3);
    expect(polylines(hits).every((line) => line.points === 2)).toBe(true);
  });

  it('has no slope table (a slope needs two points)', () => {
    expect(html).not.toContain('TTFT slope');
    assertBalanced(html);
  });
});

describe('htmlReport', () => {
  const html = htmlReport(FIXTURE);

  it('is one self-contained page with four SVG charts', () => {
    expect(html.startsWith('<!DOCTYPE html>')).toBe(true);
    expect(html.match(/<svg /g)).toHaveLength(4);
    expect(html.match(/<\/svg>/g)).toHaveLength(4);
    expect(html).not.toMatch(/<script/i);
    expect(html).not.toMatch(/<link/i);
    expect(html).not.toMatch(/(src|href)=/i);
    assertBalanced(html);
  });

  it('escapes every label', () => {
    expect(html).toContain('seed-cloud &lt;test&gt; &amp; &quot;x&quot;');
    expect(html).not.toContain('<test>');
    const odd = htmlReport({
      ...FIXTURE,
      sweepVariable: 'a<b',
      points: FIXTURE.points.map((point) => ({
        ...point,
        policies: point.policies.map((entry) => ({ ...entry, policy: `${entry.policy}"<x>` })),
      })),
    });
    expect(odd).not.toContain('<x>');
    expect(odd).not.toContain('a<b');
    expect(odd).toContain('cacheaware&quot;&lt;x&gt;');
    assertBalanced(odd);
  });

  it('holds the per-point tables and the slopes', () => {
    expect(html).toContain('<td>cacheaware</td><td>80.0</td>');
    expect(html).toContain('<td>roundrobin</td><td>8.75</td>');
  });

  it("shows the bound's row and each policy's share of it, precision, recall and unverified", () => {
    expect(html).toContain('<th>hit % of bound</th><th>precision %</th><th>recall %</th><th>unverified %</th>');
    expect(html).toContain('<td>88.9 %</td><td>86.5 %</td><td>80.0</td><td>75.0</td><td>25.0</td></tr>');
    expect(html).toContain('<tr><td>bound</td><td>92.5 ± 3.5</td><td>–</td>');
    // The oracle exports no prediction counters: dashes.
    expect(html).toContain('<td>100.0 %</td><td>97.3 %</td><td>–</td><td>–</td><td>–</td></tr>');
    expect(html.match(/<td>bound<\/td>/g)).toHaveLength(1);
  });
});
