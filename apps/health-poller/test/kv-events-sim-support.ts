import { createServer, Socket, type Server } from 'node:net';
import { poolKeys, type RedisClient } from '@kvroute/redis-store';
import { hashTokenBlock53, TOKEN_CHAIN_ROOT, tokenBlockExtra } from '@kvroute/routing';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';

/**
 * The pieces of kv-events-sim.test.ts: a real vllm-sim publishing KV events, a TCP relay the indexer's
 * SUB socket goes through (so a test can break its connection as a network would), and the comparison
 * of the sim's cache (GET /debug/kv-cache) with the owner index, block by block, in router names.
 */

export interface RunningSim {
  readonly url: string;
  readonly sim: SimServer;
  close(): Promise<void>;
}

/** A sim with a tiny KV cache publishing events on `kvEventsPort` (its replay ROUTER on +1), PYTHONHASHSEED "42". */
export async function startSim(kvEventsPort: number, numGpuBlocks: number): Promise<RunningSim> {
  const config = SimConfig.parse({
    port: 0,
    model: 'test-model',
    kvEventsPort,
    pythonHashSeed: '42',
    timeScale: 20,
    numGpuBlocks,
  });
  const sim = await createSimServer(config);
  const url = await sim.listen();
  return { url, sim, close: () => sim.close() };
}

/** startSim on a random free port pair (retried on "address in use"). */
export async function startSimOnFreePorts(numGpuBlocks: number): Promise<RunningSim & { kvEventsPort: number }> {
  for (let attempt = 0; ; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    try {
      return { ...(await startSim(port, numGpuBlocks)), kvEventsPort: port };
    } catch (error) {
      if (attempt >= 10 || !/in use/i.test(String(error))) throw error;
    }
  }
}

/**
 * A TCP relay from a loopback port to `target`: `cut()` drops every connection and stops listening
 * (a peer gets "connection refused", as when a link or a node is down), `restore()` listens again on
 * the same port.
 */
export class TcpRelay {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  get endpoint(): string {
    return `tcp://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const server = createServer((client) => {
      const upstream = new Socket();
      upstream.connect(this.target.port, this.target.host);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => undefined);
      }
      client.pipe(upstream).on('close', () => client.destroy());
      upstream.pipe(client).on('close', () => upstream.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as { port: number }).port;
    this.server = server;
  }

  /** Breaks every relayed connection and refuses new ones until `restore()`. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    const closed = server ? new Promise((resolve) => server.close(resolve)) : Promise.resolve();
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  restore(): Promise<void> {
    return this.start();
  }

  async close(): Promise<void> {
    await this.cut();
  }
}

interface DebugBlock {
  readonly block_hash: string;
  readonly parent_block_hash: string | null;
  readonly token_ids: number[];
}

/**
 * Router names of the blocks a sim's cache holds, computed from /debug/kv-cache as the router names a
 * token chain: hashTokenBlock53 over each block's 16 token ids, chained on the parent's name from
 * TOKEN_CHAIN_ROOT, extra = tokenBlockExtra(null, salt, first block). Engine hash → name is kept
 * across calls (the same tokens under the same PYTHONHASHSEED have the same hash in every sim run), so
 * a block whose parent was evicted since is still named, and every name ever seen is remembered to
 * check that what the sim no longer holds is not held in the index either.
 */
export class SimCacheNames {
  private readonly names = new Map<string, number>();
  /** Every router name seen in a cache (held now or evicted). */
  readonly everSeen = new Set<number>();
  /** Snapshots in which the cache held two copies of one block (a repeat recomputed its last block). */
  duplicateSnapshots = 0;

  /** `saltOf` gives the cache_salt of a chain's first block by its token ids (null = unsalted). */
  constructor(private readonly saltOf: (firstBlockTokens: readonly number[]) => string | null) {}

  /** The router names of every block the sim (rank 0) holds now. */
  async held(simUrl: string): Promise<Set<number>> {
    const debug = (await (await fetch(`${simUrl}/debug/kv-cache?rank=0`)).json()) as {
      ranks: { blocks: DebugBlock[] }[];
    };
    const listed = debug.ranks[0]?.blocks ?? [];
    const blocks = new Map(listed.map((block) => [block.block_hash, block]));
    if (blocks.size < listed.length) this.duplicateSnapshots += 1;
    const held = new Set<number>();
    for (const hash of blocks.keys()) held.add(this.nameOf(hash, blocks, 0));
    for (const name of held) this.everSeen.add(name);
    return held;
  }

  private nameOf(hash: string, blocks: Map<string, DebugBlock>, depth: number): number {
    const known = this.names.get(hash);
    if (known !== undefined) return known;
    const block = blocks.get(hash);
    if (block === undefined || depth > 10_000) throw new Error(`block ${hash}: neither cached nor seen before`);
    const first = block.parent_block_hash === null;
    const previous = first ? TOKEN_CHAIN_ROOT : this.nameOf(block.parent_block_hash as string, blocks, depth + 1);
    const extra = tokenBlockExtra(null, first ? this.saltOf(block.token_ids) : null, first);
    const name = hashTokenBlock53(block.token_ids, 0, block.token_ids.length, previous, extra);
    this.names.set(hash, name);
    return name;
  }
}

/**
 * Which of `names` the owner index says `rankId` holds in `pool`, read as the routing scripts read it
 * (src/lua/lib/owner-index.lua): an entry `\x01<rank>\x02<ms>` in `owners:new` or `owners:old`,
 * recorded after the rank's `forgotten` mark.
 */
export async function indexHolds(
  redis: RedisClient,
  namespace: string,
  pool: string,
  rankId: string,
  names: readonly number[],
): Promise<Set<number>> {
  if (names.length === 0) return new Set();
  const keys = poolKeys(pool, namespace);
  const fields = names.map(String);
  const [fresh, old, forgotten] = await Promise.all([
    redis.hmget(keys.ownersNew, ...fields),
    redis.hmget(keys.ownersOld, ...fields),
    redis.hget(keys.forgotten, rankId),
  ]);
  const mark = forgotten === null ? -1 : Number(forgotten.split('|')[0]);
  const marker = `\x01${rankId}\x02`;
  const counts = (owners: string | null): boolean => {
    const at = owners?.indexOf(marker) ?? -1;
    if (owners == null || at < 0) return false;
    return Number(/^\d+/.exec(owners.slice(at + marker.length))?.[0]) > mark;
  };
  const held = new Set<number>();
  names.forEach((name, i) => {
    if (counts(fresh[i] ?? null) || counts(old[i] ?? null)) held.add(name);
  });
  return held;
}

/** What differs between the sim's cache and the index: blocks missing from the index, and blocks it holds wrongly. */
export interface CacheDiff {
  readonly cached: number;
  readonly missing: number[];
  readonly extra: number[];
}

export function diffCache(cached: Set<number>, everSeen: Set<number>, inIndex: Set<number>): CacheDiff {
  return {
    cached: cached.size,
    missing: [...cached].filter((name) => !inIndex.has(name)),
    extra: [...everSeen].filter((name) => inIndex.has(name) && !cached.has(name)),
  };
}
