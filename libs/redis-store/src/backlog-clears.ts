import type { BackendId } from '@kvroute/routing';
import type { PoolKeys } from './keys';

/**
 * Backlog clears waiting for a ride (RoutingState.clearBacklog). A non-streaming request's prefill leaves its
 * backend's backlog at an estimate (the router's Lease.clearBacklogAfter), which only later decisions read. So the
 * clear waits for this replica's next decision in the lease's pool cell and goes with it (route.lua ARGV[15])
 * instead of a script call of its own, which cost ~10 % of a non-streaming request's router CPU (docs/results.md,
 * issue 30): under load that decision comes within milliseconds. Clears no decision took within `waitMs` go out
 * together, one clear-backlogs.lua call per cell. A lease released meanwhile leaves the queue (its release takes its
 * prefill off the backlog anyway).
 */
/** How long a clear waits for a decision by default, ms: a few of a loaded replica's decisions, a fraction of a prefill. */
export const DEFAULT_BACKLOG_CLEAR_WAIT_MS = 50;

export interface BacklogClearsOptions {
  /** How long a clear waits for a decision, ms (0: sent at once). */
  readonly waitMs: number;
  /** Sends a cell's clears (`'<backend>\t<lease>\n'` each) in one call. */
  readonly send: (keys: PoolKeys, clears: string) => Promise<void>;
  readonly onError: (error: unknown) => void;
}

/** Clears taken for one call: route.lua's argument (`'<backend>\t<lease>\n'` each, '' for none), and the leases. */
export interface TakenClears {
  readonly argument: string;
  /** lease id → backend id. */
  readonly leases: ReadonlyMap<string, BackendId>;
}

const NO_CLEARS: TakenClears = { argument: '', leases: new Map() };

interface CellClears {
  readonly keys: PoolKeys;
  /** lease id → backend id. */
  readonly leases: Map<string, BackendId>;
  timer: NodeJS.Timeout | null;
}

export class BacklogClears {
  /** By cell key prefix; only cells with clears waiting (a drained cell leaves). */
  private readonly cells = new Map<string, CellClears>();

  constructor(private readonly options: BacklogClearsOptions) {}

  /** Queues `leaseId`'s clear for its cell's next decision, or for a call of its own after `waitMs`. */
  add(keys: PoolKeys, backendId: BackendId, leaseId: string): void {
    let cell = this.cells.get(keys.prefix);
    if (cell === undefined) {
      cell = { keys, leases: new Map(), timer: null };
      this.cells.set(keys.prefix, cell);
    }
    cell.leases.set(leaseId, backendId);
    if (cell.timer === null) {
      const waiting = cell;
      waiting.timer = setTimeout(() => this.send(waiting), this.options.waitMs);
      waiting.timer.unref();
    }
  }

  /** The cell's waiting clears, taken off the queue for a decision call (route.lua's argument: `taken.argument`). */
  take(prefix: string): TakenClears {
    const cell = this.cells.get(prefix);
    return cell === undefined ? NO_CLEARS : this.drain(cell);
  }

  /** Puts back the clears of a call that failed (whether Redis applied them is unknown; applying twice is harmless). */
  restore(keys: PoolKeys, taken: TakenClears): void {
    for (const [leaseId, backendId] of taken.leases) this.add(keys, backendId, leaseId);
  }

  /** A released lease's clear is not needed any more. */
  drop(prefix: string, leaseId: string): void {
    this.cells.get(prefix)?.leases.delete(leaseId);
  }

  /** Clears waiting, over every cell (tests, metrics). */
  get size(): number {
    let size = 0;
    for (const cell of this.cells.values()) size += cell.leases.size;
    return size;
  }

  /** Sends what waits now, every cell, and stops the timers (a replica that stops: RedisRoutingState.sendBacklogClears). */
  async flush(): Promise<void> {
    await Promise.all([...this.cells.values()].map((cell) => this.send(cell)));
  }

  /** Takes the cell's clears and leaves the cell (a later clear starts a new one, with its own timer). */
  private drain(cell: CellClears): TakenClears {
    if (cell.timer !== null) clearTimeout(cell.timer);
    this.cells.delete(cell.keys.prefix);
    let argument = '';
    for (const [leaseId, backendId] of cell.leases) argument += `${backendId}\t${leaseId}\n`;
    return { argument, leases: cell.leases };
  }

  private async send(cell: CellClears): Promise<void> {
    const taken = this.drain(cell);
    if (taken.leases.size > 0) await this.options.send(cell.keys, taken.argument).catch(this.options.onError);
  }
}
