import type { PrometheusExposition, PrometheusSample } from './prometheus-text';

/**
 * Reads the series of one sample name as one number. Series are grouped by their labels minus the
 * dialect's replica labels (labels such as SGLang's `tp_rank` whose series repeat one scheduler's
 * view): within a group the largest value stands for it, across groups values are summed (`sum`) or
 * averaged (`mean`). NaN and ±Inf values are skipped, as if the series were absent; so are negative
 * values in `sum` (counts and counters are never negative). No usable series → null.
 */
export class SeriesReader {
  private readonly byName = new Map<string, PrometheusSample[]>();

  constructor(
    exposition: PrometheusExposition,
    private readonly replicaLabels: readonly string[] = [],
  ) {
    for (const sample of exposition.samples) {
      const list = this.byName.get(sample.name);
      if (list) list.push(sample);
      else this.byName.set(sample.name, [sample]);
    }
  }

  /** Every sample of that name, in input order. */
  samples(name: string): readonly PrometheusSample[] {
    return this.byName.get(name) ?? [];
  }

  sum(name: string): number | null {
    const values = this.groupValues(name, (value) => value >= 0);
    return values.length === 0 ? null : values.reduce((total, value) => total + value, 0);
  }

  mean(name: string): number | null {
    const values = this.groupValues(name, () => true);
    return values.length === 0 ? null : values.reduce((total, value) => total + value, 0) / values.length;
  }

  /** The first of `names` that has a usable series, read with `read`. */
  firstOf(names: readonly string[], read: (name: string) => number | null): number | null {
    for (const name of names) {
      const value = read(name);
      if (value !== null) return value;
    }
    return null;
  }

  private groupValues(name: string, accept: (value: number) => boolean): number[] {
    const groups = new Map<string, number>();
    for (const { labels, value } of this.samples(name)) {
      if (!Number.isFinite(value) || !accept(value)) continue;
      const key = groupKey(labels, this.replicaLabels);
      const previous = groups.get(key);
      groups.set(key, previous === undefined ? value : Math.max(previous, value));
    }
    return [...groups.values()];
  }
}

function groupKey(labels: Readonly<Record<string, string>>, replicaLabels: readonly string[]): string {
  const kept = Object.entries(labels)
    .filter(([label]) => !replicaLabels.includes(label))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify(kept);
}

/** `value` clamped to [0, 1]; null stays null. */
export function clampRatio(value: number | null): number | null {
  return value === null ? null : Math.min(1, Math.max(0, value));
}
