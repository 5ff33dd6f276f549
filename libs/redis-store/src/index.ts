export { createRedis, reconnectDelayMs, redisOptionsFor, waitUntilReady, REQUEST_PATH_COMMAND_TIMEOUT_MS, type CreateRedisOptions, type RedisRole } from './connection';
export { blockHashArg, DEFAULT_KEY_NAMESPACE, KEY_SUFFIX, poolHashTag, poolKeys, type PoolKeys } from './keys';
export { RedisRoutingState, type RedisRoutingStateOptions } from './redis-routing-state';
export { RedisStoreError, type RedisStoreErrorCode } from './redis-store-error';
export { SCRIPTS, type LuaScript, type RedisClient } from './scripts';
