/**
 * Types for `parse-prometheus-text-format` (ships none), covering what it returns: prom2json-style
 * families. Values stay strings, as printed. A histogram or summary family whose series carry labels
 * other than `le`/`quantile` keeps its samples unflattened.
 */
declare module 'parse-prometheus-text-format' {
  export interface PrometheusSample {
    readonly value?: string;
    readonly labels?: Readonly<Record<string, string>>;
    readonly timestamp_ms?: string;
    /** Flattened histogram: `le` → cumulative count. */
    readonly buckets?: Readonly<Record<string, string>>;
    /** Flattened summary: `quantile` → value. */
    readonly quantiles?: Readonly<Record<string, string>>;
    readonly count?: string;
    readonly sum?: string;
    readonly bucket?: string;
  }

  export interface PrometheusFamily {
    readonly name: string;
    readonly help: string;
    readonly type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    readonly metrics: readonly PrometheusSample[];
  }

  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
