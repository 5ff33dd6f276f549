/**
 * The one place that knows policies by name (config values, lower-case single words as the seed
 * router names them). Everything else holds a `RoutingPolicy` and never asks which one it is.
 * Adding a policy: its file under policies/ (the policy, its algorithm header and its parameter
 * table), its test, one line in POLICIES below; then `npm run docs:config` (the router's config keys,
 * flags, env vars and docs derive from the tables).
 */

import type { RoutingPolicy } from '../types';
import { CACHE_AWARE_PARAMS, createCacheAwarePolicy } from './cache-aware';
import { CHWBL_PARAMS, createChwblPolicy } from './chwbl';
import { createKvAwarePolicy, KV_AWARE_PARAMS } from './kv-aware';
import { createKvRouterPolicy, KV_ROUTER_PARAMS } from './kv-router';
import { createLeastLoadedPolicy, LEAST_LOADED_PARAMS } from './least-loaded';
import { defaultsOf, type ParamSpec, type ParamsOf, type ParamTable, type ParamValue } from './policy-params';
import { createPrefixAwarePolicy, PREFIX_AWARE_PARAMS } from './prefix-aware';
import { createRandomPolicy, RANDOM_PARAMS } from './random';
import { createRoundRobinPolicy, ROUND_ROBIN_PARAMS } from './round-robin';
import { createSessionPolicy, SESSION_PARAMS } from './session';

/** A policy as the registry knows it: its parameter table and its factory (which resolves and checks the parameters). */
export interface PolicyDefinition<T extends ParamTable = ParamTable> {
  readonly params: T;
  create(params: Partial<ParamsOf<T>>): RoutingPolicy;
}

/** Policies by name, in the order the config docs list their parameters. */
export const POLICIES = {
  cacheaware: { params: CACHE_AWARE_PARAMS, create: createCacheAwarePolicy },
  prefixaware: { params: PREFIX_AWARE_PARAMS, create: createPrefixAwarePolicy },
  kvrouter: { params: KV_ROUTER_PARAMS, create: createKvRouterPolicy },
  kvaware: { params: KV_AWARE_PARAMS, create: createKvAwarePolicy },
  chwbl: { params: CHWBL_PARAMS, create: createChwblPolicy },
  session: { params: SESSION_PARAMS, create: createSessionPolicy },
  leastloaded: { params: LEAST_LOADED_PARAMS, create: createLeastLoadedPolicy },
  roundrobin: { params: ROUND_ROBIN_PARAMS, create: createRoundRobinPolicy },
  random: { params: RANDOM_PARAMS, create: createRandomPolicy },
} as const satisfies Readonly<Record<string, PolicyDefinition>>;

export type PolicyName = keyof typeof POLICIES;
export const POLICY_NAMES = Object.keys(POLICIES) as [PolicyName, ...PolicyName[]];

/** Each policy's full parameter set. */
export type PolicyParamsByName = { readonly [N in PolicyName]: ParamsOf<(typeof POLICIES)[N]['params']> };

/** Optional overrides, one object per policy name; what is left out takes the default. */
export type PolicyParams = { readonly [N in PolicyName]?: Partial<PolicyParamsByName[N]> };

export const DEFAULT_POLICY_PARAMS = Object.fromEntries(
  Object.entries(POLICIES).map(([name, definition]) => [name, defaultsOf(definition.params)]),
) as unknown as {
  readonly [N in PolicyName]: PolicyParamsByName[N];
};

export function isPolicyName(value: string): value is PolicyName {
  return Object.hasOwn(POLICIES, value);
}

/**
 * A new policy instance (one per pool: some policies keep state such as a counter or ring cache).
 * Only `params[name]` is read. Throws RangeError for out-of-range parameters.
 */
export function createPolicy(name: PolicyName, params: PolicyParams = {}): RoutingPolicy {
  const definition: PolicyDefinition = POLICIES[name];
  return definition.create(params[name] ?? {});
}

/** Policy definitions by name: the built-in POLICIES, or those plus a test's own. */
export type PolicyDefinitions = Readonly<Record<string, PolicyDefinition>>;

/** One router config key set by policy parameters, with every parameter it sets (several when policies share it). */
export interface PolicySettingKey {
  readonly key: string;
  readonly rows: readonly { readonly policy: string; readonly param: string; readonly spec: ParamSpec }[];
}

/** Every config key the tables name, in table order (a shared key where it first appears). */
export function policySettingKeys(definitions: PolicyDefinitions = POLICIES): PolicySettingKey[] {
  const byKey = new Map<string, { policy: string; param: string; spec: ParamSpec }[]>();
  for (const [policy, definition] of Object.entries(definitions)) {
    for (const [param, spec] of Object.entries(definition.params)) {
      if (spec.configKey === undefined) continue;
      let rows = byKey.get(spec.configKey);
      if (rows === undefined) {
        rows = [];
        byKey.set(spec.configKey, rows);
      }
      rows.push({ policy, param, spec });
    }
  }
  return [...byKey].map(([key, rows]) => ({ key, rows }));
}

/**
 * Policy parameters from config settings (key → value, as the router config holds them): each
 * parameter with a config key takes that key's value; an unset key (undefined) leaves each policy's
 * own default.
 */
export function policyParamsFromSettings(settings: Readonly<Record<string, unknown>>): PolicyParams;
export function policyParamsFromSettings(
  settings: Readonly<Record<string, unknown>>,
  definitions: PolicyDefinitions,
): Record<string, Record<string, unknown>>;
export function policyParamsFromSettings(
  settings: Readonly<Record<string, unknown>>,
  definitions: PolicyDefinitions = POLICIES,
): Record<string, Record<string, unknown>> {
  const params: Record<string, Record<string, unknown>> = {};
  for (const { key, rows } of policySettingKeys(definitions)) {
    const value = settings[key];
    if (value === undefined) continue;
    for (const { policy, param } of rows) (params[policy] ??= {})[param] = value;
  }
  return params;
}

type Row<D extends PolicyDefinitions> = { [N in keyof D]: D[N]['params'][keyof D[N]['params']] }[keyof D];
type SettingKeyOf<R> = R extends { readonly configKey: infer K extends string } ? K : never;

/** The config settings the tables of `D` declare: key → the value type of its parameters. */
export type PolicySettings<D extends PolicyDefinitions = typeof POLICIES> = {
  readonly [K in SettingKeyOf<Row<D>>]?: ParamValue<Extract<Row<D>, { readonly configKey: K }>>;
};
