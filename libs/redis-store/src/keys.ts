import { createHash } from 'node:crypto';
import clusterKeySlot from 'cluster-key-slot';
import type { BackendId, BlockHash } from '@kvroute/routing';
import { MAX_POOL_CELLS } from './store-limits';

/**
 * Every Redis key this package uses is built here (bullmq's queue-keys style). The Lua scripts get the
 * fixed keys of a call through KEYS and build the per-backend prefill keys themselves from the pool's
 * key prefix (ARGV) with the suffix below: the backend of an expired lease being purged is only known
 * inside the script. The "key schema" test in `test/integration/scripts.int.test.ts`
 * checks that the scripts create exactly the keys this module names.
 *
 * Layout: `<namespace>:{<tag>}:<suffix>`, namespace `kvr:v1` by default. Every key of one pool (one
 * model) carries the same hash tag, so on Redis Cluster a pool lives in one slot and each script runs
 * on one shard; different models spread over the shards. A pool split into cells (`poolCells`,
 * docs/adr/0007) has one tag per cell (cellHashTag).
 */

/** Default namespace: the schema version is part of it, so an incompatible layout can move to `kvr:v2`. */
export const DEFAULT_KEY_NAMESPACE = 'kvr:v1';

/** Suffixes the Lua scripts append to the pool prefix. Change them here and in `src/lua/*.lua` together. */
export const KEY_SUFFIX = {
  ownersNew: 'owners:new',
  ownersOld: 'owners:old',
  generation: 'generation',
  prefill: 'prefill:',
  leaseDeadlines: 'lease-deadlines',
  inflight: 'inflight',
  pending: 'pending',
  forgotten: 'forgotten',
  calibration: 'calibration',
  members: 'members:',
  // 'engine' held an older field format (base 36, space-separated): a new name, so routers of both versions
  // can share a Redis during an upgrade without reading each other's fields.
  engine: 'engine-figures',
} as const;

const DIGEST_LIKE = /^[0-9a-f]{40}$/;
/** How a cell's tag ends (cellHashTag): a model named so is digested, so no model takes a cell's tag. */
const CELL_TAG_LIKE = /#\d+-\d+$/;

/**
 * The hash tag of a pool: the model name itself when it can serve as one, else its SHA-1 in hex.
 * A name with `{` or `}` would end the tag early, an empty tag (`{}`) is ignored by Redis Cluster, a
 * name ending like a cell's tag (`#<cell>-<k>`) could be another pool's cell, and a name that already
 * looks like a digest is digested too, so two pools (or cells) never share a tag.
 */
export function poolHashTag(pool: string): string {
  if (pool.length > 0 && !/[{}]/.test(pool) && !CELL_TAG_LIKE.test(pool) && !DIGEST_LIKE.test(pool)) return pool;
  return createHash('sha1').update(pool, 'utf8').digest('hex');
}

/** Redis Cluster's hash slots. */
const CLUSTER_SLOTS = 16_384;

/** Which cell of how many (`poolCells`): `{ index: 0, count: 1 }` is a pool that is not split. */
export interface PoolCell {
  readonly index: number;
  readonly count: number;
}

const cellTags = new Map<string, string>();

/**
 * The hash tag of cell `index` of `count`: `<pool tag>#<index>-<k>` with the smallest k whose slot
 * falls inside the index-th of `count` equal slot ranges, one slot in from each end (`redis-cli
 * --cluster create` rounds its boundaries, so a boundary slot may be the neighbour's). A cluster made
 * so (or resharded evenly) gives each master one contiguous range, so `count` = a multiple of the
 * masters puts the same number of cells on every master; a hash alone would often put two of three
 * cells on one master. About `count` tries per cell (CRC16 of a short string), once per process (cached).
 */
export function cellHashTag(pool: string, cell: PoolCell): string {
  const { index, count } = cell;
  if (!Number.isInteger(count) || count < 1 || count > MAX_POOL_CELLS)
    throw new RangeError(`cells must be an integer in [1, ${MAX_POOL_CELLS}], got ${count}`);
  if (!Number.isInteger(index) || index < 0 || index >= count)
    throw new RangeError(`cell must be an integer in [0, ${count}), got ${index}`);
  const tag = poolHashTag(pool);
  if (count === 1) return tag;
  const known = `${index}/${count}/${tag}`;
  const cached = cellTags.get(known);
  if (cached !== undefined) return cached;
  // Inside [low, high), boundary slots left out: at least 16384 / 64 - 2 = 254 slots to hit.
  const low = Math.ceil((index * CLUSTER_SLOTS) / count) + 1;
  const high = Math.floor(((index + 1) * CLUSTER_SLOTS) / count) - 1;
  for (let k = 0; k < MAX_CELL_TAG_TRIES; k++) {
    const candidate = `${tag}#${index}-${k}`;
    const slot = clusterKeySlot(candidate);
    if (slot >= low && slot < high) {
      cellTags.set(known, candidate);
      return candidate;
    }
  }
  throw new Error(
    `no tag of cell ${index} of ${count} for ${JSON.stringify(pool)} found in ${MAX_CELL_TAG_TRIES} tries`,
  );
}

/** A bound that a uniform hash never reaches for a range of 254+ slots out of 16384 (p < 1e-100). */
const MAX_CELL_TAG_TRIES = 100_000;

/** The keys of one pool. */
export interface PoolKeys {
  /** `<namespace>:{<tag>}:`, the prefix the Lua scripts append suffixes to. */
  readonly prefix: string;
  /**
   * HASH block hash → its owners recorded in the current generation (`\x01<id>\x02<ms>` each):
   * the owner index's newer half (see src/lua/lib/owner-index.lua).
   */
  readonly ownersNew: string;
  /** HASH, the same for the previous generation; dropped whole when the current one turns. */
  readonly ownersOld: string;
  /** STRING: ms the current owner generation started. */
  readonly generation: string;
  /**
   * HASH backend id → `<ms forgotten>[|<retention ms>]`: ownership recorded at or before that time, or
   * older than the backend's learned retention, no longer counts (src/lua/lib/owner-index.lua).
   */
  readonly forgotten: string;
  /** HASH calibrated figure → its learned value, and `<figure>:n` → samples merged (learn.lua). */
  readonly calibration: string;
  /**
   * ZSET of every lease of the pool → deadline (ms), the pool-wide expiry index the scripts purge from;
   * member `<byte length of backend id>:<backend id><lease id>` (built in Lua, unambiguous for any ids).
   */
  readonly leaseDeadlines: string;
  /** HASH backend id → leases in flight in this pool (expired ones until purged); no field = 0. */
  readonly inflight: string;
  /** HASH backend id → prefill tokens pending over those leases; no field = 0. */
  readonly pending: string;
  /** HASH lease id → prefill tokens still pending, one field per lease of one backend in this pool. */
  prefill(backendId: BackendId): string;
  /**
   * HASH, one member set of the pool under its version (a digest of its ids and weights: pool-members.ts):
   * `n` → count, `#<position>` → `<id>\t<weight>`, `@<id>` → position; expires when no router uses it.
   */
  members(version: string): string;
  /** HASH backend id → engine figures (pool-members.ts `engineFiguresField`): the engines' own, as routers last saw them. */
  readonly engine: string;
}

/**
 * The keys a decision reads and writes, in the order reserve.lua and route.lua take them as KEYS[1..7]
 * (route.lua adds its member set and engine figures).
 */
export function decisionKeys(keys: PoolKeys): string[] {
  return [
    keys.forgotten,
    keys.leaseDeadlines,
    keys.inflight,
    keys.pending,
    keys.ownersNew,
    keys.ownersOld,
    keys.generation,
  ];
}

/** The keys of one pool, or of one cell of a split pool. */
export function poolKeys(
  pool: string,
  namespace: string = DEFAULT_KEY_NAMESPACE,
  cell: PoolCell = { index: 0, count: 1 },
): PoolKeys {
  const prefix = `${namespace}:{${cellHashTag(pool, cell)}}:`;
  return {
    prefix,
    ownersNew: prefix + KEY_SUFFIX.ownersNew,
    ownersOld: prefix + KEY_SUFFIX.ownersOld,
    generation: prefix + KEY_SUFFIX.generation,
    forgotten: prefix + KEY_SUFFIX.forgotten,
    calibration: prefix + KEY_SUFFIX.calibration,
    leaseDeadlines: prefix + KEY_SUFFIX.leaseDeadlines,
    inflight: prefix + KEY_SUFFIX.inflight,
    pending: prefix + KEY_SUFFIX.pending,
    prefill: (backendId) => prefix + KEY_SUFFIX.prefill + backendId,
    members: (version) => prefix + KEY_SUFFIX.members + version,
    engine: prefix + KEY_SUFFIX.engine,
  };
}

/** A block hash as it appears in the owner index's fields: the decimal integer (exact: block hashes are 53-bit). */
export function blockHashArg(blockHash: BlockHash): string {
  if (!Number.isSafeInteger(blockHash) || blockHash < 0)
    throw new RangeError(`block hash must be a non-negative safe integer, got ${blockHash}`);
  return String(blockHash);
}

/** Bytes per block in a packed argument (src/lua/lib/batched.lua): 16 right-aligned digits, then ','. */
export const PACKED_BLOCK_WIDTH = 17;

/** Chains packed already: a request's chain is sent twice (routing, then the first output), packed once. */
const packedChains = new WeakMap<readonly BlockHash[], string>();

/**
 * A chain of block hashes as the scripts take it: one argument whatever its length (an argument per
 * block would overflow the call stack spreading a huge chain), fixed width so that a script reads any
 * block in place (src/lua/lib/batched.lua). 2^53 has 16 digits, so every hash fits.
 */
export function packBlockHashes(blockHashes: readonly BlockHash[]): string {
  if (blockHashes.length === 0) return '';
  const known = packedChains.get(blockHashes);
  if (known !== undefined) return known;
  let packed = '';
  for (const blockHash of blockHashes) packed += `${blockHashArg(blockHash).padStart(PACKED_BLOCK_WIDTH - 1, ' ')},`;
  packedChains.set(blockHashes, packed);
  return packed;
}

/**
 * The keys of the fleet: what every pool shares, i.e. the backend set the router replicas route over.
 * All carry the hash tag `{fleet}`, so `change-backend-set.lua` touches one Redis Cluster slot.
 */
export interface FleetKeys {
  /** HASH backend id → entry JSON `{id, url, models?, weight, drained, updatedAtMs}`: the fleet's backends. */
  readonly backends: string;
  /** STRING: the backend set's version, bumped by every change (starts at the ms the set was created). */
  readonly version: string;
  /** HASH backend id → ms it was removed: seeding from a replica's config does not bring it back. */
  readonly removed: string;
  /** Pub/sub channel (not a key) that gets the new version after every change. */
  readonly changes: string;
}

export function fleetKeys(namespace: string = DEFAULT_KEY_NAMESPACE): FleetKeys {
  const backends = `${namespace}:{fleet}:backends`;
  return { backends, version: `${backends}:version`, removed: `${backends}:removed`, changes: `${backends}:changes` };
}

/**
 * The keys of the backends' published state (`RedisBackendStateStore`: written by the health poller,
 * read by routers). All carry the hash tag `{fleet}`, so `record-backend-scrape` touches one Redis
 * Cluster slot. Each state hash expires by itself a few poll intervals after its last scrape.
 */
export interface BackendStateKeys {
  /** HASH per backend: its published state JSON, health counters, last observation, carry-over; PEXPIREd at every scrape. */
  state(backendId: string): string;
  /** ZSET backend id → ms its state hash expires: which backends may have a state, without SCAN (trimmed by each write). */
  readonly index: string;
  /** Pub/sub channel (not a key) that gets a backend's new state JSON whenever its health or load changed. */
  readonly changes: string;
}

export function backendStateKeys(namespace: string = DEFAULT_KEY_NAMESPACE): BackendStateKeys {
  const index = `${namespace}:{fleet}:backend-states`;
  return {
    state: (backendId) => `${namespace}:{fleet}:backend-state:${backendId}`,
    index,
    changes: `${index}:changes`,
  };
}

/**
 * The keys of one tenant's limits (admit-tenant.lua, settle-tenant.lua; docs/adr/0006). All carry the
 * hash tag `{tenant:<tag>}` (the tenant id as poolHashTag makes a tag of it), so one admission is one
 * script on one Redis Cluster slot, whatever pool the request goes to; tenants spread over the shards.
 */
export interface TenantKeys {
  /** HASH bucket field (`<scope>:<requests|tokens>`) → its GCRA theoretical arrival time, ms. */
  readonly rates: string;
  /** ZSET lease id → deadline ms: the tenant's requests in flight. */
  readonly tenantLeases: string;
  /** ZSET lease id → deadline ms: one API key's requests in flight. */
  keyLeases(keyId: string): string;
}

export function tenantKeys(tenant: string, namespace: string = DEFAULT_KEY_NAMESPACE): TenantKeys {
  const prefix = `${namespace}:{tenant:${poolHashTag(tenant)}}:`;
  return {
    rates: `${prefix}rates`,
    tenantLeases: `${prefix}leases:tenant`,
    keyLeases: (keyId) => `${prefix}leases:key:${keyId}`,
  };
}

/**
 * The keys of the client API keys (change-api-keys.lua; docs/adr/0006). Both carry the hash tag
 * `{api-keys}`, so adding or revoking a key is one script on one Redis Cluster slot.
 */
export interface ApiKeyKeys {
  /** HASH SHA-256 hex of a key's secret → its record JSON (`{id, tenant, role, limits…}`): what a request's key is looked up in. */
  readonly byDigest: string;
  /** HASH key id → the SHA-256 hex of its secret: revocation by id. */
  readonly byId: string;
  /** STRING: the fleet's cache-salt secret when no replica was given one (created once, SET NX). */
  readonly cacheSaltSecret: string;
}

export function apiKeyKeys(namespace: string = DEFAULT_KEY_NAMESPACE): ApiKeyKeys {
  const prefix = `${namespace}:{api-keys}:`;
  return { byDigest: `${prefix}by-digest`, byId: `${prefix}by-id`, cacheSaltSecret: `${prefix}cache-salt-secret` };
}

/** ZSET replica id → ms it last said it was alive: how many router replicas share the limits (`{fleet}`). */
export function routerReplicasKey(namespace: string = DEFAULT_KEY_NAMESPACE): string {
  return `${namespace}:{fleet}:router-replicas`;
}

/**
 * STRING per stored Responses API response: the id of the backend that stored it (RedisResponseOwners;
 * SET with PX, so it expires by itself). The hash tag is the response id's own (`{resp:<id>}`: a
 * response id is letters, digits, `_.:-` only, RESPONSE_ID_PATTERN), so the entries spread over the
 * shards and each read or write is one key in one slot; the cache scope (a tenant's or team's, empty in
 * open mode) follows the tag, digested so that any scope string makes a short key of fixed shape.
 */
export function responseOwnerKey(scope: string, responseId: string, namespace: string = DEFAULT_KEY_NAMESPACE): string {
  const scopeDigest = scope === '' ? 'open' : createHash('sha1').update(scope, 'utf8').digest('hex');
  return `${namespace}:{resp:${responseId}}:owner:${scopeDigest}`;
}

/**
 * The keys of the KV-event indexer's subscriptions (the health poller; kv-events-lease.lua): which
 * poller replica reads each backend rank's event stream, and the last sequence number applied from it.
 * All carry the hash tag `{kv-events}` (one slot: a lease and its cursor change in one script). A
 * subscription id is the rank id (`<backend id>` or `<backend id>@<rank>`), after the tag, so a brace
 * in it cannot move the key to another slot.
 */
export interface KvEventsKeys {
  /** STRING per subscription: the replica id holding it, with the lease TTL. */
  lease(subscription: string): string;
  /** STRING per subscription: the last applied sequence number (decimal u64), expiring a while after its last write. */
  cursor(subscription: string): string;
  /** ZSET replica id → ms it last said it was alive: the replicas the subscriptions are shared over. */
  readonly replicas: string;
}

export function kvEventsKeys(namespace: string = DEFAULT_KEY_NAMESPACE): KvEventsKeys {
  const prefix = `${namespace}:{kv-events}:`;
  return {
    lease: (subscription) => `${prefix}lease:${subscription}`,
    cursor: (subscription) => `${prefix}cursor:${subscription}`,
    replicas: `${prefix}replicas`,
  };
}

/**
 * The keys of one pool's flow-control queue (flow-queue.lua; issue 30). All carry the hash tag
 * `{flow:<pool tag>}`: one admission, poll or leave is one script on one Redis Cluster slot, and pools
 * spread over the shards apart from their routing keys (a queued request reads nothing of the index).
 */
export interface FlowKeys {
  /** ZSET request id → lease deadline ms: the pool's admitted requests. */
  readonly inflight: string;
  /** ZSET request id → class × 2^48 + start tag: the requests waiting, in dispatch order. */
  readonly queue: string;
  /** ZSET request id → ms after which a waiting request is dropped (its replica gave up or died). */
  readonly queueDeadlines: string;
  /** HASH `v` virtual time, `f:<flow>` each flow's last finish tag. */
  readonly state: string;
  /** HASH `n:<flow>` each flow's admitted requests, `w:<flow>` its weight (flows with one admitted). */
  readonly flows: string;
  /** HASH request id → `<weight>:<flow>`, queued or admitted. */
  readonly owners: string;
}

export function flowKeys(pool: string, namespace: string = DEFAULT_KEY_NAMESPACE): FlowKeys {
  const prefix = `${namespace}:{flow:${poolHashTag(pool)}}:`;
  return {
    inflight: `${prefix}inflight`,
    queue: `${prefix}queue`,
    queueDeadlines: `${prefix}queue-deadlines`,
    state: `${prefix}state`,
    flows: `${prefix}flows`,
    owners: `${prefix}owners`,
  };
}

/**
 * The keys of on-demand LoRA adapter loads (adapter-load.lua), per base model: all carry `{lora:<base tag>}` (one
 * slot per base model, whatever the adapter or backend), the base's tag as poolHashTag makes it.
 */
export interface AdapterLoadKeys {
  /** STRING: the replica loading `adapter` onto `backend` now (its token), expiring at the load timeout. */
  claim(backendId: string, adapter: string): string;
  /** STRING: present while a load on `backend` is too recent for another. */
  spacing(backendId: string): string;
  /** STRING: present while a failed load keeps `adapter` off `backend`. */
  unavailable(backendId: string, adapter: string): string;
  /** HASH backend id → ms `adapter` was loaded there (by a router). */
  loaded(adapter: string): string;
}

export function adapterLoadKeys(base: string, namespace: string = DEFAULT_KEY_NAMESPACE): AdapterLoadKeys {
  const prefix = `${namespace}:{lora:${poolHashTag(base)}}:`;
  return {
    claim: (backendId, adapter) => `${prefix}claim:${backendId}:${adapter}`,
    spacing: (backendId) => `${prefix}spacing:${backendId}`,
    unavailable: (backendId, adapter) => `${prefix}unavailable:${backendId}:${adapter}`,
    loaded: (adapter) => `${prefix}loaded:${adapter}`,
  };
}
