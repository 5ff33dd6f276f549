/**
 * The one place that knows policies by name (config values, lower-case single words as the seed
 * router names them). Everything else holds a `RoutingPolicy` and never asks which one it is.
 * Adding a policy: one file under policies/, one line in each table below.
 */

import type { RoutingPolicy } from '../types';
import { createCacheAwarePolicy, DEFAULT_CACHE_AWARE_PARAMS, type CacheAwareParams } from './cache-aware';
import { createChwblPolicy, DEFAULT_CHWBL_PARAMS, type ChwblParams } from './chwbl';
import { createKvAwarePolicy, DEFAULT_KV_AWARE_PARAMS, type KvAwareParams } from './kv-aware';
import { createKvRouterPolicy, DEFAULT_KV_ROUTER_PARAMS, type KvRouterParams } from './kv-router';
import { createLeastLoadedPolicy, DEFAULT_LEAST_LOADED_PARAMS, type LeastLoadedParams } from './least-loaded';
import { createOraclePolicy, DEFAULT_ORACLE_PARAMS, type OracleParams } from './oracle';
import { createPrefixAwarePolicy, DEFAULT_PREFIX_AWARE_PARAMS, type PrefixAwareParams } from './prefix-aware';
import { createRandomPolicy, DEFAULT_RANDOM_PARAMS, type RandomParams } from './random';
import { createRoundRobinPolicy, DEFAULT_ROUND_ROBIN_PARAMS, type RoundRobinParams } from './round-robin';
import { createSessionPolicy, DEFAULT_SESSION_PARAMS, type SessionParams } from './session';

export const POLICY_NAMES = ['cacheaware', 'prefixaware', 'kvrouter', 'kvaware', 'chwbl', 'session', 'leastloaded', 'roundrobin', 'random', 'oracle'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/** Each policy's full parameter set. */
export interface PolicyParamsByName {
  readonly cacheaware: CacheAwareParams;
  readonly prefixaware: PrefixAwareParams;
  readonly kvrouter: KvRouterParams;
  readonly kvaware: KvAwareParams;
  readonly chwbl: ChwblParams;
  readonly session: SessionParams;
  readonly leastloaded: LeastLoadedParams;
  readonly roundrobin: RoundRobinParams;
  readonly random: RandomParams;
  readonly oracle: OracleParams;
}

/** Optional overrides, one object per policy name; what is left out takes the default. */
export type PolicyParams = { readonly [N in PolicyName]?: Partial<PolicyParamsByName[N]> };

export const DEFAULT_POLICY_PARAMS: { readonly [N in PolicyName]: PolicyParamsByName[N] } = {
  cacheaware: DEFAULT_CACHE_AWARE_PARAMS,
  prefixaware: DEFAULT_PREFIX_AWARE_PARAMS,
  kvrouter: DEFAULT_KV_ROUTER_PARAMS,
  kvaware: DEFAULT_KV_AWARE_PARAMS,
  chwbl: DEFAULT_CHWBL_PARAMS,
  session: DEFAULT_SESSION_PARAMS,
  leastloaded: DEFAULT_LEAST_LOADED_PARAMS,
  roundrobin: DEFAULT_ROUND_ROBIN_PARAMS,
  random: DEFAULT_RANDOM_PARAMS,
  oracle: DEFAULT_ORACLE_PARAMS,
};

const POLICY_FACTORIES: { readonly [N in PolicyName]: (params: Partial<PolicyParamsByName[N]>) => RoutingPolicy } = {
  cacheaware: createCacheAwarePolicy,
  prefixaware: createPrefixAwarePolicy,
  kvrouter: createKvRouterPolicy,
  kvaware: createKvAwarePolicy,
  chwbl: createChwblPolicy,
  session: createSessionPolicy,
  leastloaded: createLeastLoadedPolicy,
  roundrobin: createRoundRobinPolicy,
  random: createRandomPolicy,
  oracle: createOraclePolicy,
};

export function isPolicyName(value: string): value is PolicyName {
  return (POLICY_NAMES as readonly string[]).includes(value);
}

/**
 * A new policy instance (one per pool: some policies keep state such as a counter or ring cache).
 * Only `params[name]` is read. Throws RangeError for out-of-range parameters.
 */
export function createPolicy<N extends PolicyName>(name: N, params: PolicyParams = {}): RoutingPolicy {
  const factory: (overrides: Partial<PolicyParamsByName[N]>) => RoutingPolicy = POLICY_FACTORIES[name];
  const overrides: Partial<PolicyParamsByName[N]> = params[name] ?? {};
  return factory(overrides);
}
