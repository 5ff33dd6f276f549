import type { Histogram } from '../engine/histogram';
import { ExpositionWriter, formatPythonClientValue, sortedLabels } from './exposition-writer';

/**
 * What Python `prometheus_client`'s `generate_latest` prints (text format 0.0.4), for the engines built
 * on it (vLLM, SGLang). Rules reproduced:
 * - labels sorted by name on every sample, `le` included;
 * - counters: HELP/TYPE and sample all named `<base>_total`;
 * - histograms: one `_bucket` per bound (`le` via floatToGoString, so `1.0`, `+Inf`), `_count`, `_sum`;
 * - every value through floatToGoString (`7.0`, `2.417733e+06`).
 * Two process models differ:
 * - single process (vLLM V1 with one API server): each counter and histogram family is followed by a
 *   gauge family `<base>_created` holding the series' creation time in unix seconds (same HELP), and a
 *   histogram prints buckets, `_count`, `_sum`;
 * - multiprocess directory (vLLM V0 0.6.x, SGLang): no `_created` at all, and a histogram prints
 *   `_sum` first, then buckets, then `_count` (the order the files are merged in).
 */
export type PythonClientProcessModel =
  | { readonly kind: 'single-process'; readonly createdUnixSeconds: number }
  | { readonly kind: 'multiprocess' };

export type LabelSet = Readonly<Record<string, string>>;

export interface ScalarSeries {
  readonly labels: LabelSet;
  readonly value: number;
}

export interface HistogramSeries {
  readonly labels: LabelSet;
  readonly histogram: Histogram;
}

export class PythonClientExposition {
  private readonly writer = new ExpositionWriter(formatPythonClientValue);

  constructor(private readonly processModel: PythonClientProcessModel) {}

  gauge(name: string, help: string, series: readonly ScalarSeries[]): void {
    this.writer.family(name, 'gauge', help);
    for (const { labels, value } of series) this.writer.sample(name, sortedLabels(labels), value);
  }

  /** `name` with or without `_total`: prometheus_client strips it and prints it back on the TYPE line and sample. */
  counter(name: string, help: string, series: readonly ScalarSeries[]): void {
    const base = name.endsWith('_total') ? name.slice(0, -'_total'.length) : name;
    this.writer.family(`${base}_total`, 'counter', help);
    for (const { labels, value } of series) this.writer.sample(`${base}_total`, sortedLabels(labels), value);
    this.createdFamily(base, help, series);
  }

  /** `bounds` are the engine's own bucket bounds (each must be a bound of the histogram); `+Inf` is added. */
  histogram(name: string, help: string, bounds: readonly number[], series: readonly HistogramSeries[]): void {
    this.writer.family(name, 'histogram', help);
    for (const { labels, histogram } of series) {
      const sum = (): void => this.writer.sample(`${name}_sum`, sortedLabels(labels), histogram.sum);
      const count = (): void => this.writer.sample(`${name}_count`, sortedLabels(labels), histogram.count);
      if (this.processModel.kind === 'multiprocess') sum();
      for (const bound of [...bounds, Infinity]) {
        const bucketLabels = sortedLabels({ ...labels, le: formatPythonClientValue(bound) });
        this.writer.sample(`${name}_bucket`, bucketLabels, histogram.cumulativeCount(bound));
      }
      count();
      if (this.processModel.kind === 'single-process') sum();
    }
    this.createdFamily(name, help, series);
  }

  text(): string {
    return this.writer.text();
  }

  private createdFamily(base: string, help: string, series: ReadonlyArray<{ readonly labels: LabelSet }>): void {
    if (this.processModel.kind !== 'single-process') return;
    this.writer.family(`${base}_created`, 'gauge', help);
    for (const { labels } of series)
      this.writer.sample(`${base}_created`, sortedLabels(labels), this.processModel.createdUnixSeconds);
  }
}
