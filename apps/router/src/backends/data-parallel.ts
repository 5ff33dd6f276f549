import type { BackendId } from '@kvroute/routing';

/**
 * A backend URL that serves several data-parallel engine ranks (vLLM `--data-parallel-size`), each with
 * its own KV cache and scheduler. The router routes to the rank, not the URL: every rank is a backend
 * of its own (its own load, leases and prefix ownership), and the request names it in the
 * `X-data-parallel-rank` header, which vLLM honours (vllm/entrypoints/openai/serving_engine.py
 * `_get_data_parallel_rank`; 400 when out of range). Without it vLLM balances over the ranks by their
 * queues, blind to their caches.
 *
 * The header carries the *global* rank under vLLM's internal load balancing (one URL for all ranks)
 * and the *local* rank under hybrid load balancing (`--data-parallel-hybrid-lb`: one URL per node, its
 * ranks counted from 0; `startRank` = `--data-parallel-start-rank`, the node's first global rank).
 * Ranks are named by their global rank: `<backend id>@<global rank>`, as the KV-event indexer names them
 * (vLLM offsets each rank's event port by it).
 */
export interface DataParallel {
  /** Ranks behind this URL (vLLM `--data-parallel-size`, or `--data-parallel-size-local` under hybrid LB). */
  readonly size: number;
  /** Global rank of the first (hybrid LB's `--data-parallel-start-rank`); 0 otherwise. */
  readonly startRank: number;
  /** Hybrid LB: the header carries the local rank (0 .. size − 1), not the global one. */
  readonly hybridLb: boolean;
}

/** One rank of a data-parallel backend, as the request path sends to it. */
export interface DataParallelRank {
  /** Its global rank (in its id and its engine's metrics and events). */
  readonly global: number;
  /** What `X-data-parallel-rank` carries for it. */
  readonly header: number;
}

/** The id of one rank of the backend `engineId`. */
export function rankIdOf(engineId: BackendId, globalRank: number): BackendId {
  return `${engineId}@${globalRank}`;
}

/** The ranks a backend is routed as, in rank order: none (null) for a backend without data parallelism. */
export function ranksOf(dataParallel: DataParallel | null | undefined): readonly DataParallelRank[] | null {
  if (dataParallel === null || dataParallel === undefined || dataParallel.size <= 1) return null;
  return Array.from({ length: dataParallel.size }, (_, local) => ({
    global: dataParallel.startRank + local,
    header: dataParallel.hybridLb ? local : dataParallel.startRank + local,
  }));
}

/** Whether two data-parallel settings route the same ranks the same way. */
export function sameDataParallel(a: DataParallel | null | undefined, b: DataParallel | null | undefined): boolean {
  const ranksA = ranksOf(a);
  const ranksB = ranksOf(b);
  if (ranksA === null || ranksB === null) return ranksA === ranksB;
  return (
    ranksA.length === ranksB.length &&
    ranksA.every((rank, k) => rank.global === ranksB[k]?.global && rank.header === ranksB[k]?.header)
  );
}
