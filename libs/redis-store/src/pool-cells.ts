import { combineHash53, hashString53, hashToUnitInterval, type BackendId, type BlockHash } from '@kvroute/routing';

/**
 * A pool split into cells (docs/adr/0007): each cell is its own hash slot (keys.ts, `poolKeys(pool,
 * namespace, cell)`) holding the owner index, leases and load of its backends only, so one hot model
 * spreads over as many Redis Cluster shards as it has cells, and each decision is still one atomic
 * script on one shard. Both mappings below are functions of ids and hashes alone, so every router
 * replica agrees on them without coordination.
 */

/** Keeps a backend's cell and a request's cell weights apart from other uses of the same hashes. */
const CELL_SEED = 0x6365_6c6c;

/**
 * The cell of a backend: rendezvous over the cells by its id (0 when the pool is not split). Depends
 * on the id and the number of cells only, never on which backends are healthy now: a backend's leases
 * and ownership must always live in one cell. Changing the number of cells moves about the new cells'
 * share of the backends (their ownership is rebuilt, as after a restart).
 */
export function backendCell(backendId: BackendId, cells: number): number {
  if (cells <= 1) return 0;
  const idHash = hashString53(backendId, CELL_SEED);
  let best = 0;
  let bestWeight = -1;
  for (let cell = 0; cell < cells; cell++) {
    const weight = combineHash53(idHash, cell);
    if (weight > bestWeight) {
      best = cell;
      bestWeight = weight;
    }
  }
  return best;
}

/**
 * The cells a request tries, best first: weighted rendezvous of the request's head hash (its first
 * block: a conversation's turns and a shared system prompt land in one cell, where their prefix is)
 * over the cells that have eligible backends, each weighted by how many it has (`sizes[cell]`), so a
 * cell's share of the requests follows its share of the backends. Cells of size 0 are left out.
 * Score `-size / ln(u)` with u uniform in (0, 1) per (head, cell): higher is better, unitless.
 */
export function requestCellOrder(headHash: BlockHash, sizes: readonly number[]): number[] {
  const scored: { cell: number; score: number }[] = [];
  sizes.forEach((size, cell) => {
    if (size > 0) scored.push({ cell, score: -size / Math.log(hashToUnitInterval(combineHash53(combineHash53(headHash, CELL_SEED), cell))) });
  });
  return scored.sort((a, b) => b.score - a.score || a.cell - b.cell).map((entry) => entry.cell);
}
