import {
  CACHE_AWARE_PARAMS,
  isChoiceParam,
  policySettingKeys,
  POLICIES,
  resolveParams,
  type CacheAwareParams,
  type PolicySettings,
} from '@kvroute/routing';
import { z } from 'zod';

/** The oracle router's two rules: `oracle` (oracle-choice.ts) and `oracle-cost` (oracle-cost-choice.ts). */
export const ORACLE_RULES = ['oracle', 'oracle-cost'] as const;
export type OracleRule = (typeof ORACLE_RULES)[number];

/** cacheaware's router config keys (prefillMsPerToken, spreadAbs, …), from its parameter table: oracle-cost takes the same. */
const CACHE_AWARE_SETTINGS = policySettingKeys({ cacheaware: POLICIES.cacheaware }).map(({ key, rows }) => ({
  key,
  param: rows[0]?.param as keyof CacheAwareParams,
}));

function boundedNumber(spec: { min?: number; max?: number; exclusiveMin?: boolean; integer?: boolean }): z.ZodType {
  let field = z.coerce.number();
  if (spec.integer === true) field = field.int();
  if (spec.min !== undefined) field = spec.exclusiveMin === true ? field.gt(spec.min) : field.min(spec.min);
  if (spec.max !== undefined) field = field.max(spec.max);
  return field;
}

function cacheAwareFields(): Record<string, z.ZodType> {
  const fields: Record<string, z.ZodType> = {};
  for (const { key, param } of CACHE_AWARE_SETTINGS) {
    const spec = CACHE_AWARE_PARAMS[param];
    // The parameter table's bounds, here too: a value out of range is a configuration error (exit 2, one line),
    // as it is for the router, not a failure of the started process.
    const field = isChoiceParam(spec) ? z.enum(spec.values) : boundedNumber(spec);
    fields[key] = field.optional().describe(`oracle-cost: cacheaware's ${spec.doc} (default ${spec.default})`);
  }
  return fields;
}

/**
 * The oracle router's configuration (benchmarks only). Precedence as every kvroute process:
 * defaults < config file < env (`KVROUTE_ORACLE_*`) < flags. The bench's local cluster passes
 * `--host`, `--port`, `--backends`, `--rule` and a scenario's `cluster.routerByPolicy.<rule>` keys as
 * flags (for `oracle-cost` also cacheaware's keys and `blockSizeBytes` from `cluster.router` and
 * `routerByPolicy.cacheaware`, so it weighs costs as the cacheaware runs do).
 */
export const OracleConfig = z.object({
  host: z.string().default('127.0.0.1').describe('address to listen on (loopback: the oracle is a benchmark tool)'),
  port: z.coerce.number().int().min(0).max(65_535).default(0).describe('port to listen on (0: any free port)'),
  backends: z
    .array(z.url())
    .min(1)
    .describe('vllm-sim backend URLs (comma-separated on the command line); each must answer POST /sim/match'),
  rule: z
    .enum(ORACLE_RULES)
    .default('oracle')
    .describe("oracle: the largest true match; oracle-cost: cacheaware's cost rule fed the true matches"),
  matchTimeoutMs: z.coerce
    .number()
    .int()
    .positive()
    .default(500)
    .describe("how long to wait for each backend's POST /sim/match before counting it as holding nothing, ms"),
  bodyLimitBytes: z.coerce
    .number()
    .int()
    .positive()
    .default(64 * 1024 * 1024)
    .describe('largest request body accepted (it is held in memory to be asked about and relayed), bytes'),
  blockSizeBytes: z.coerce
    .number()
    .int()
    .min(8)
    .max(4096)
    .default(256)
    .describe(
      "oracle-cost: the routers' routing block size (the unit of minMatchBlocks; the head hash ties are broken by), bytes",
    ),
  ...cacheAwareFields(),
});

/** cacheaware's config settings (key → value), typed from its parameter table. */
export type CacheAwareSettings = PolicySettings<{ readonly cacheaware: (typeof POLICIES)['cacheaware'] }>;

export type OracleConfig = z.infer<typeof OracleConfig> & CacheAwareSettings;

export const ORACLE_ENV_PREFIX = 'KVROUTE_ORACLE_';

/** cacheaware's config keys, as the oracle router accepts them for oracle-cost. */
export const CACHE_AWARE_SETTING_KEYS: readonly string[] = CACHE_AWARE_SETTINGS.map(({ key }) => key);

/** cacheaware's parameters from the config's cacheaware keys (unset: the table's default). @throws RangeError naming a bad value. */
export function oracleCostParams(settings: CacheAwareSettings): CacheAwareParams {
  const overrides: Record<string, unknown> = {};
  const values = settings as Readonly<Record<string, unknown>>;
  for (const { key, param } of CACHE_AWARE_SETTINGS) if (values[key] !== undefined) overrides[param] = values[key];
  return resolveParams(CACHE_AWARE_PARAMS, overrides as Partial<CacheAwareParams>);
}
