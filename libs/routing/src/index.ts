export * from './types';
export { renderRoutingText, type RenderedRoutingText } from './prefix/routing-text';
export { hashRoutingText, type HashedRoutingText } from './prefix/block-hasher';
export { buildRoutingRequest, type RoutingRequestOptions } from './prefix/routing-request';
export {
  chooseByBoundedLoadHash,
  chooseWithBoundedLoad,
  loadBound,
  rendezvousOrder,
  type BoundedLoadChoice,
} from './policies/bounded-load-hash';
export { createRoundRobinPolicy, DEFAULT_ROUND_ROBIN_PARAMS, type RoundRobinParams } from './policies/round-robin';
export { createRandomPolicy, DEFAULT_RANDOM_PARAMS, type RandomParams } from './policies/random';
export { createLeastLoadedPolicy, DEFAULT_LEAST_LOADED_PARAMS, type LeastLoadedParams } from './policies/least-loaded';
export { createPrefixAwarePolicy, DEFAULT_PREFIX_AWARE_PARAMS, type PrefixAwareParams } from './policies/prefix-aware';
export { createKvAwarePolicy, DEFAULT_KV_AWARE_PARAMS, kvDemandTokens, type KvAwareParams } from './policies/kv-aware';
export { createKvRouterPolicy, DEFAULT_KV_ROUTER_PARAMS, type KvRouterParams } from './policies/kv-router';
export { createSessionPolicy, DEFAULT_SESSION_PARAMS, type SessionParams } from './policies/session';
export { createChwblPolicy, DEFAULT_CHWBL_PARAMS, type ChwblParams } from './policies/chwbl';
export { createOraclePolicy, DEFAULT_ORACLE_PARAMS, type OracleParams } from './policies/oracle';
export { createCacheAwarePolicy, DEFAULT_CACHE_AWARE_PARAMS, engineReportedFreeTokens, engineWaiting, type CacheAwareParams } from './policies/cache-aware';
export {
  createPolicy,
  DEFAULT_POLICY_PARAMS,
  isPolicyName,
  POLICY_NAMES,
  type PolicyName,
  type PolicyParams,
  type PolicyParamsByName,
} from './policies/policy-registry';
export type { DecideInput, DecideResult, RoutingSnapshot, RoutingStateStore } from './state/routing-state';
export { candidatesOf, decideWithSnapshot } from './state/decide-with-snapshot';
export { InMemoryRoutingState, type InMemoryRoutingStateOptions } from './state/in-memory-routing-state';
export { DEFAULT_BYTES_PER_TOKEN, estimatePrefillTokens } from './prefix/prefill-estimate';
