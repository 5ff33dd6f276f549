import { describe, expect, it } from 'vitest';
import { FIXTURE } from './test-fixture';
import { formatStat, markdownReport, markdownTable, policyVerdict, terminalReport, textTable } from './render';
import { summarize } from './summary';

const summary = summarize(FIXTURE);

describe('formatStat and tables', () => {
  it('shows mean ± stddev for several seeds, the mean alone for one', () => {
    expect(formatStat({ mean: 31.25, stddev: 8.8388, n: 2 })).toBe('31.3 ± 8.8');
    expect(formatStat({ mean: 2, stddev: 0, n: 1 }, 2)).toBe('2.00');
    expect(formatStat(undefined)).toBe('–');
  });

  it('pads text columns and escapes Markdown cells', () => {
    expect(textTable(['a', 'bb'], [['xyz', '1']]).split('\n')).toEqual(['a    bb', '───  ──', 'xyz   1']);
    expect(markdownTable(['a', 'b'], [['x|y', '1']])).toBe('| a | b |\n|---|---:|\n| x\\|y | 1 |');
  });
});

describe('markdownReport', () => {
  const markdown = markdownReport(summary);

  it('has one table per sweep point with the expected rows', () => {
    expect(markdown).toContain('## sessions = 4');
    expect(markdown).toContain('## sessions = 8');
    expect(markdown).toContain(
      '| policy | KV hit % | backend hit % | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | e2e p50 ms ' +
        '| RPS | errors | p50 vs base | p99 vs base | hit % of oracle | hit % of bound | precision ' +
        '% | recall % | unverified % |\n',
    );
    expect(markdown).toContain(
      '| roundrobin | 31.3 ± 8.8 | – | 25.0 ± 7.1 | 45.0 ± 7.1 | 45.0 ± 7.1 | 250.0 ± 70.7 | 1.50 ' +
        '± 0.71 | 0.0 ± 0.0 | 1.67× | 1.29× | 34.7 % | 33.8 % | 50.0 | 16.7 ± 23.6 | 0.0 ± 0.0 |\n',
    );
    expect(markdown).toContain(
      '| leastloaded (base) | 0.0 | – | 15.0 | 35.0 | 35.0 | 150.0 | 2.00 | 1.0 | 1.00× | 1.00× | 0.0 % | 0.0 % | – | – | – |\n',
    );
    expect(markdown).toContain(
      '| cacheaware | 80.0 | 75.0 | 9.0 | 15.0 | 15.0 | 90.0 | 2.00 | 0.0 | 0.60× | 0.43× | 88.9 % | 86.5 % | 80.0 | 75.0 | 25.0 |\n',
    );
    expect(markdown).toContain(
      '| oracle | 90.0 | – | 8.0 | 16.0 | 16.0 | 80.0 | 2.00 | 0.0 | 0.53× | 0.46× | 100.0 % | 97.3 % | – | – | – |\n',
    );
    expect(markdown).toContain('| bound | 92.5 ± 3.5 | – | – | – | – | – | – | – | – | – | – | – | – | – | – |\n');
  });

  it('has no bound row where the replay evicted (sessions = 8), and says the oracle is no upper bound', () => {
    const eight = markdown.slice(markdown.indexOf('## sessions = 8'));
    expect(eight).not.toContain('| bound |');
    expect(eight).toContain(
      '| cacheaware | 70.0 | – | 11.0 | 13.0 | 13.0 | 110.0 | 2.00 | 0.0 | 0.28× | 0.22× | 87.5 % | – | – | – | – |\n',
    );
    expect(markdown).toContain('not an upper bound');
  });

  it('has the slope table', () => {
    expect(markdown).toContain('## TTFT slope, sessions 4 → 8');
    expect(markdown).toContain('| roundrobin | +8.75 | +8.75 |');
    expect(markdown).toContain('| cacheaware | +0.50 | −0.50 |');
  });

  it('has no slope table for a single sweep point (there is no slope to show)', () => {
    const single = markdownReport(summarize({ ...FIXTURE, points: FIXTURE.points.slice(0, 1) }));
    expect(single).toContain('## sessions = 4');
    expect(single).not.toContain('TTFT slope');
  });
});

describe('terminalReport', () => {
  it('prints one aligned table per sweep point and the slopes', () => {
    const text = terminalReport(summary);
    expect(text).toContain('sessions = 4');
    expect(text).toContain('sessions = 8');
    expect(text).toContain('TTFT slope, sessions 4 → 8');
    const lines = text.split('\n');
    const header = lines.find((line) => line.startsWith('policy') && line.includes('TTFT p50 ms'))!;
    const row = lines.find((line) => line.startsWith('cacheaware') && line.includes('88.9 %'))!;
    expect([...row].length).toBe([...header].length);
    expect(header).toMatch(/hit % of oracle\s+hit % of bound\s+precision %\s+recall %\s+unverified %$/);
    expect(row).toMatch(/ 88\.9 %\s+86\.5 %\s+80\.0\s+75\.0\s+25\.0$/);
    const boundLine = lines.find((line) => line.startsWith('bound'))!;
    expect(boundLine).toMatch(/^bound\s+92\.5 ± 3\.5\s+–/);
  });
});

describe('policyVerdict', () => {
  const summary = (policy: string, hit: number, p50: number) => ({
    policy,
    seeds: 1,
    kvHitPct: { mean: hit, stddev: 0, n: 1 },
    ttftP50Ms: { mean: p50, stddev: 0, n: 1 },
  });

  it('says whether the candidate won on both hit rate and TTFT p50, with the figures', () => {
    expect(policyVerdict(summary('cacheaware', 86.1, 61), summary('roundrobin', 56.4, 1844))).toBe(
      'cacheaware beats roundrobin: KV hit 86.1 % vs 56.4 %, TTFT p50 61 ms vs 1844 ms (30.2× lower).',
    );
    expect(policyVerdict(summary('cacheaware', 90, 120), summary('roundrobin', 80, 100))).toBe(
      'cacheaware did NOT beat roundrobin: KV hit 90.0 % vs 80.0 %, TTFT p50 120 ms vs 100 ms.',
    );
    expect(policyVerdict(undefined, summary('roundrobin', 1, 1))).toBeUndefined();
  });
});
