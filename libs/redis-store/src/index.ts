export { probeRedisAuth, type RedisAuthProbe } from './auth-probe';
export {
  DEFAULT_BACKEND_SET_POLL_MS,
  RedisBackendSet,
  type BackendEntry,
  type BackendEntrySpec,
  type BackendKvEvents,
  type BackendSetChange,
  type BackendSetList,
  type BackendSetWatch,
  type RedisBackendSetOptions,
  type WatchBackendSetOptions,
} from './backend-set';
export {
  clusterOptionsFor,
  createRedis,
  isClusterUrl,
  parseClusterUrl,
  quitRedis,
  reconnectDelayMs,
  redisOptionsFor,
  redisUrlNodes,
  waitUntilReady,
  REQUEST_PATH_COMMAND_TIMEOUT_MS,
  type ClusterUrl,
  type CreateRedisOptions,
  type RedisNodeAddress,
  type RedisRole,
} from './connection';
export {
  blockHashArg,
  DEFAULT_KEY_NAMESPACE,
  fleetKeys,
  flowKeys,
  type FlowKeys,
  type FleetKeys,
  cellHashTag,
  KEY_SUFFIX,
  type PoolCell,
  PACKED_BLOCK_WIDTH,
  packBlockHashes,
  poolHashTag,
  poolKeys,
  adapterLoadKeys,
  type AdapterLoadKeys,
  type PoolKeys,
  responseOwnerKey,
} from './keys';
export {
  KvEventsIndex,
  KvEventsLeases,
  readFollowedKvEventStreams,
  type AppliedKvEvents,
  type KvEventOp,
  type KvEventsBatch,
  type KvEventsIndexOptions,
  type KvEventsLeaseState,
  type KvEventsLeasesOptions,
} from './kv-events-index';
export { RedisResponseOwners, type RedisResponseOwnersOptions } from './response-owners';
export { clearPoolState } from './clear-pool-state';
export { backendCell, cellKeyOf, requestCellOrder } from './pool-cells';
export { ENGINE_FIGURES_PER_CALL, MEMBER_SET_TTL_MS } from './pool-members';
export { routeScriptOf } from './route-call';
export { DEFAULT_CELL_KEY_BYTES, DEFAULT_SHORTLIST, MAX_POOL_CELLS, RECORD_BLOCKS_PER_CALL } from './store-limits';
export { RedisRoutingState, type RedisRoutingStateOptions } from './redis-routing-state';
export { RedisStoreError, type RedisStoreErrorCode } from './redis-store-error';
export { defineScript, preloadScript, SCRIPTS, type LuaScript, type RedisClient } from './scripts';
export {
  RedisBackendStateStore,
  type BackendStateSubscription,
  type HealthHysteresis,
  type RecordedScrape,
  type RecordScrapeOptions,
  type RedisBackendStateStoreOptions,
  type ScrapeRecord,
  type SubscribeBackendStatesOptions,
} from './backend-state-store';
export {
  apiKeyKeys,
  type ApiKeyKeys,
  kvEventsKeys,
  type KvEventsKeys,
  backendStateKeys,
  type BackendStateKeys,
  routerReplicasKey,
  tenantKeys,
  type TenantKeys,
} from './keys';
export { RedisApiKeyStore, type ApiKeyStoreOptions } from './api-key-store';
export { RouterReplicas, type RouterReplicasOptions } from './router-replicas';
export {
  TenantLimits,
  type AdmitOutcome,
  type AdmitRequest,
  type LimitScope,
  type RateLimit,
  type RateState,
  type RateUnit,
  type TenantLimitsOptions,
} from './tenant-limits';
export {
  RedisFlowQueue,
  type FlowCapacity,
  type FlowEntry,
  type FlowQueueStore,
  type FlowReply,
} from './flow-queue';
export { RedisAdapterLoads, type AdapterLoadBook, type AdapterLoadClaim, type AdapterLoadTimes } from './adapter-loads';
