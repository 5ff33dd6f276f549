import { describe, expect, it } from 'vitest';
import { parsePrometheusText } from './prometheus-text';
import { clampRatio, SeriesReader } from './series-reader';

const reader = (text: string, replicaLabels: readonly string[] = []) =>
  new SeriesReader(parsePrometheusText(text), replicaLabels);

describe('SeriesReader', () => {
  it('sums distinct series and averages them for mean', () => {
    const series = reader('g{dp="0"} 2\ng{dp="1"} 6\n');
    expect(series.sum('g')).toBe(8);
    expect(series.mean('g')).toBe(4);
  });

  it('lets the largest value stand for series that differ only in replica labels, whatever the label order', () => {
    const series = reader('g{dp="0",tp="0"} 2\ng{tp="1",dp="0"} 3\ng{dp="1",tp="0"} 10\n', ['tp']);
    expect(series.sum('g')).toBe(13);
    expect(series.mean('g')).toBe(6.5);
  });

  it('skips NaN, ±Inf and, for sums, negative values; nothing usable is null', () => {
    const series = reader('g{a="1"} NaN\ng{a="2"} +Inf\ng{a="3"} -1\ng{a="4"} 5\nh NaN\n');
    expect(series.sum('g')).toBe(5);
    expect(series.mean('g')).toBe(2);
    expect(series.sum('h')).toBeNull();
    expect(series.mean('absent')).toBeNull();
    expect(series.firstOf(['absent', 'h', 'g'], (name) => series.sum(name))).toBe(5);
  });

  it('clamps ratios to [0, 1]', () => {
    expect([clampRatio(-0.2), clampRatio(0.3), clampRatio(1.7), clampRatio(null)]).toEqual([0, 0.3, 1, null]);
  });
});
