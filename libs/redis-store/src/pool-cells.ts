import {
  combineHash53,
  hashString53,
  weightedRendezvousScore,
  type BackendId,
  type BlockHash,
  type RoutingRequest,
} from '@kvroute/routing';
import { poolKeys, type PoolKeys } from './keys';
import { MAX_POOL_CELLS } from './store-limits';

/**
 * A pool split into cells (docs/adr/0007): each cell is its own hash slot (keys.ts, `poolKeys(pool,
 * namespace, cell)`) holding the owner index, leases and load of its backends only, so one hot model
 * spreads over as many Redis Cluster shards as it has cells, and each decision is still one atomic
 * script on one shard. Both mappings below are functions of ids and hashes alone, so every router
 * replica agrees on them without coordination.
 */

/**
 * The hash that chooses a request's cell: the chained hash of its last full block before
 * min(first turn start + `keyBytes`, first turn end) (`RoutingRequest.firstTurnBytes`: the first message
 * after the instructions), i.e. of the instructions and the opening of the conversation. Every later turn
 * of the conversation renders the same text up to there, so all its turns share a cell, while
 * conversations that share only a system prompt (a model's whole traffic, often) spread over the cells;
 * a cell keyed by the first block would take them all. A first turn shorter than one block is keyed by
 * the block it ends in, or the last block of a shorter text. A completion, or a chat without a first
 * turn, is keyed by its head hash (its first block): nothing else is known to stay the same as its
 * prompt grows, so completions that share a first block share a cell.
 */
export function cellKeyOf(
  request: Pick<RoutingRequest, 'blockHashes' | 'blockSizeBytes' | 'headHash' | 'firstTurnBytes'>,
  keyBytes: number,
): BlockHash {
  const { blockHashes, blockSizeBytes, firstTurnBytes } = request;
  if (blockHashes.length === 0 || blockSizeBytes <= 0 || firstTurnBytes === undefined) return request.headHash;
  const keyEnd = Math.min(firstTurnBytes.start + keyBytes, firstTurnBytes.end);
  const keyBlocks = Math.max(1, Math.floor(keyEnd / blockSizeBytes));
  return blockHashes[Math.min(blockHashes.length, keyBlocks) - 1] as BlockHash;
}

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
 * The cells a request tries, best first: weighted rendezvous of the request's cell key (cellKeyOf: the
 * turns of a conversation share it, so they find their prefix in their cell) over the cells that have
 * eligible backends, each weighted by how many it has (`sizes[cell]`), so a
 * cell's share of the requests follows its share of the backends. Cells of size 0 are left out.
 */
export function requestCellOrder(cellKey: BlockHash, sizes: readonly number[]): number[] {
  const scored: { cell: number; score: number }[] = [];
  sizes.forEach((size, cell) => {
    if (size > 0)
      scored.push({
        cell,
        score: weightedRendezvousScore(combineHash53(combineHash53(cellKey, CELL_SEED), cell), size),
      });
  });
  return scored.sort((a, b) => b.score - a.score || a.cell - b.cell).map((entry) => entry.cell);
}

/**
 * Where one store's pools live: the number of cells each is split into, each backend's cell (cached:
 * a fleet has a bounded number of ids), and each cell's keys (cached per pool and cell).
 */
export class PoolLayout {
  /** cell → pool → its keys. */
  private readonly keysByCell: Map<string, PoolKeys>[] = [];
  private readonly cellByBackend = new Map<BackendId, number>();

  constructor(
    readonly cells: number,
    private readonly namespace: string,
  ) {
    if (!Number.isSafeInteger(cells) || cells < 1 || cells > MAX_POOL_CELLS) {
      throw new RangeError(`poolCells must be an integer in [1, ${MAX_POOL_CELLS}], got ${cells}`);
    }
  }

  /** The keys of one cell of a pool (the pool's own keys when it is not split). */
  keys(pool: string, cell: number): PoolKeys {
    const known = (this.keysByCell[cell] ??= new Map());
    let keys = known.get(pool);
    if (!keys) {
      keys = poolKeys(pool, this.namespace, { index: cell, count: this.cells });
      known.set(pool, keys);
    }
    return keys;
  }

  /** The cell holding a backend's leases and ownership (always 0 in a pool that is not split). */
  cellOf(backendId: BackendId): number {
    if (this.cells === 1) return 0;
    let cell = this.cellByBackend.get(backendId);
    if (cell === undefined) {
      cell = backendCell(backendId, this.cells);
      this.cellByBackend.set(backendId, cell);
    }
    return cell;
  }

  /** `items` per cell (index = cell; empty for a cell none is in), by their backend's cell. */
  splitByCell<T>(items: readonly T[], idOf: (item: T) => BackendId): T[][] {
    const byCell: T[][] = Array.from({ length: this.cells }, () => []);
    for (const item of items) (byCell[this.cellOf(idOf(item))] as T[]).push(item);
    return byCell;
  }
}
