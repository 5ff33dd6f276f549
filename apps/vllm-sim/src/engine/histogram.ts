/**
 * A fixed-bucket histogram that can be read back at any of its bounds, so one set of observations
 * serves several metric dialects whose bucket lists differ (vLLM V1, vLLM V0 and SGLang): the stored
 * bounds are the union of every dialect's bounds, and each dialect reads the cumulative count at its own.
 */
export class Histogram {
  private readonly bounds: readonly number[];
  private readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(...boundLists: ReadonlyArray<readonly number[]>) {
    this.bounds = [...new Set(boundLists.flat())].sort((a, b) => a - b);
    this.counts = new Array<number>(this.bounds.length).fill(0);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    // Linear scan: ≤ 40 bounds and most observations land in the first few.
    for (let i = 0; i < this.bounds.length; i++) {
      if (value <= (this.bounds[i] as number)) {
        this.counts[i] = (this.counts[i] as number) + 1;
        return;
      }
    }
  }

  /** Observations ≤ `bound`; `bound` must be one of the bounds given at construction (or +Infinity). */
  cumulativeCount(bound: number): number {
    if (bound === Infinity) return this.count;
    let total = 0;
    for (let i = 0; i < this.bounds.length; i++) {
      total += this.counts[i] as number;
      if (this.bounds[i] === bound) return total;
    }
    throw new Error(`histogram has no bound ${bound}`);
  }
}
