import { EngineError } from '../engine-errors';
import type { Engine, Sequence, SequenceSpec } from './engine';
import type { EngineLoop } from './engine-loop';

/** What the serving code needs of an engine: one rank's loop, or the data-parallel balancer. */
export interface SequenceRunner {
  /** An engine whose settings (version, max model length) every rank shares. */
  readonly engine: Engine;
  readonly timeScale: number;
  submit(spec: SequenceSpec): Sequence;
  abort(sequence: Sequence): void;
}

/** vLLM's header (read case-insensitively; Node lower-cases header names). */
export const DATA_PARALLEL_RANK_HEADER = 'x-data-parallel-rank';

/**
 * `--data-parallel-size N`: N engines (each its own block pool, scheduler and stats) behind one HTTP port,
 * as vLLM's internal load balancing serves them (read in vLLM's source, README "Data parallel"):
 * - a request's `X-data-parallel-rank` header is parsed with Python's `int()`; a value that does not parse
 *   is ignored (`OpenAIServing._get_data_parallel_rank`); a parsed rank outside [0, N) is a 400
 *   "data_parallel_rank R is out of range [0, N)." (the input processor's check), also with N = 1;
 * - without it, `DPLBAsyncMPClient.get_core_engine_for_request` picks argmin(4 · waiting + running) over the
 *   ranks, the first lowest from rank 0. vLLM reads counts the coordinator publishes every ~100 ms and adds
 *   its own picks in between; the sim reads its engines' live counts, which is what that estimates.
 * Each sequence (each of `n` choices, as vLLM balances child requests one by one) runs where it was put.
 */
export class DataParallelRanks implements SequenceRunner {
  private readonly owners = new WeakMap<Sequence, EngineLoop>();

  constructor(readonly loops: readonly EngineLoop[]) {
    if (loops.length === 0) throw new Error('at least one engine');
  }

  get size(): number {
    return this.loops.length;
  }

  get engine(): Engine {
    return (this.loops[0] as EngineLoop).engine;
  }

  get timeScale(): number {
    return (this.loops[0] as EngineLoop).timeScale;
  }

  loop(rank: number): EngineLoop {
    return this.loops[rank] as EngineLoop;
  }

  /** argmin over ranks of 4 · waiting + running; ties go to the lowest rank. */
  pickRank(): number {
    let best = 0;
    let bestScore = Number.POSITIVE_INFINITY;
    for (let rank = 0; rank < this.loops.length; rank++) {
      const engine = (this.loops[rank] as EngineLoop).engine;
      const score = 4 * engine.waitingCount + engine.runningCount;
      if (score < bestScore) {
        bestScore = score;
        best = rank;
      }
    }
    return best;
  }

  submit(spec: SequenceSpec): Sequence {
    const loop = this.loop(this.pickRank());
    const sequence = loop.submit(spec);
    this.owners.set(sequence, loop);
    return sequence;
  }

  abort(sequence: Sequence): void {
    this.owners.get(sequence)?.abort(sequence);
  }

  /** The runner for one request: the rank its header names, else the balancer (rank 0 when N = 1). */
  runnerFor(header: string | string[] | undefined): SequenceRunner {
    const rank = parseRankHeader(header);
    if (rank === null) return this.size === 1 ? this.loop(0) : this;
    if (rank < 0 || rank >= this.size)
      throw new EngineError('bad-request', `data_parallel_rank ${rank} is out of range [0, ${this.size}).`);
    return this.loop(rank);
  }
}

/** Python `int(s)` on a header value: optional whitespace and sign, digits with single underscores. */
export function parseRankHeader(header: string | string[] | undefined): number | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined) return null;
  const text = value.trim();
  if (!/^[+-]?\d+(_\d+)*$/.test(text)) return null;
  // Beyond 2^53 the value is inexact but still out of any range, as Python finds it.
  return Number(text.replaceAll('_', ''));
}
