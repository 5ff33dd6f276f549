/**
 * The store's limits and defaults that a configuration names (the router's config schema: its defaults and bounds),
 * in a module that imports nothing: `@kvroute/redis-store/limits` gives them to a command's --help without loading
 * ioredis and the store (apps/router/src/main.ts). The store's modules use them from here.
 */

/** Cells a pool may be split into (`poolCells`): a cell is a hash slot, and a cluster has a few hundred shards at most. */
export const MAX_POOL_CELLS = 64;

/** How far into the first turn the cell key reaches by default: 16 KiB, ~4k tokens. */
export const DEFAULT_CELL_KEY_BYTES = 16_384;

/**
 * New blocks one script call records at most (~1 ms of Redis on the machines we measure; a 2,048-block
 * chain recorded in one call took 2–4 ms of CPU and up to ~13 ms by SLOWLOG's clock on a loaded host).
 * Prompts up to 32 k tokens (at 256-byte blocks) are recorded in the call that takes the lease or
 * completes the prefill; a longer one takes one more call per 512 blocks.
 */
export const RECORD_BLOCKS_PER_CALL = 512;

/**
 * Who takes part in a big pool's decision (route.lua ARGV[11]): the backends with entries on the
 * chain's deepest recorded blocks (found by the script in the owner index, when the rule reads depths),
 * and the caller's picks: the first few the rule prefers (the cost rule: the first of the request's
 * rendezvous order, where a cold prompt goes), the least loaded as this replica last saw them (its view
 * is refreshed by every reply), and a few more spread by the lease id (so every backend's load is read
 * now and then). The rule then runs over them as over a whole pool.
 */
export const DEFAULT_SHORTLIST = { above: 32, owners: 8, preferred: 4, leastLoaded: 4, spread: 2 } as const;
