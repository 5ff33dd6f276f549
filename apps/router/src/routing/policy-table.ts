import {
  CACHE_AWARE_PARAMS,
  CALIBRATED_PARAMS,
  calibratedOverrides,
  createPolicy,
  POLICIES,
  type CalibratedParam,
  type LearnedCalibration,
  type PolicyName,
  type RoutingPolicy,
} from '@kvroute/routing';

/** The prefill rate assumed for queue samples when the generation policy has none of its own (cacheaware's default). */
const DEFAULT_PREFILL_MS_PER_TOKEN = CACHE_AWARE_PARAMS.prefillMsPerToken.default;

/** A learned figure that moved less than this fraction since the policy was last built does not rebuild it. */
const REBUILD_CHANGE = 0.02;

export interface PolicyTableOptions {
  readonly policy: PolicyName;
  readonly passthroughPolicy: PolicyName;
  /** How a disaggregated request's prefill backend is chosen (router config `pdPrefillPolicy`); default: `policy`. */
  readonly prefillPolicy?: PolicyName;
  /** Every policy's parameters from the router config (`policyParamsFromSettings`). */
  readonly params: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** The learned figures that replace the configured ones (router config `calibratedFigures`; empty: none). */
  readonly calibratedFigures: readonly CalibratedParam[];
}

/** A pool's cost-model figures: configured, learned (with their samples) and in use. */
export interface PoolCostModel {
  readonly configured: Readonly<Partial<Record<CalibratedParam, number>>>;
  readonly learned: LearnedCalibration;
  readonly inUse: Readonly<Partial<Record<CalibratedParam, number>>>;
}

/**
 * The policy instance for each pool and endpoint kind, created on first use (some policies keep state,
 * such as a counter). Both configured policies are created once at start, so a parameter out of range
 * fails at start, not on the first request.
 *
 * Calibration: a pool's learned figures (`applyLearned`, from the learn stage) override the configured
 * parameters of the same names (bytesPerToken, prefillMsPerToken, queueMsPerRequest) for every policy
 * whose parameter table has them, once MIN_CALIBRATION_SAMPLES back a figure; the pool's generation
 * policy is then built again, only when a figure moved by REBUILD_CHANGE or more.
 */
export class PolicyTable {
  private readonly policies = new Map<string, RoutingPolicy>();
  private readonly learned = new Map<string, LearnedCalibration>();
  private readonly overrides = new Map<string, Partial<Record<CalibratedParam, number>>>();
  private configuredPrefillMsPerToken: number | undefined;

  constructor(private readonly options: PolicyTableOptions) {
    this.policyFor('', 'generation');
    this.policyFor('', 'passthrough');
  }

  readonly policyFor = (pool: string, kind: 'generation' | 'passthrough'): RoutingPolicy => {
    const key = `${kind}\u0000${pool}`;
    let policy = this.policies.get(key);
    if (!policy) {
      const name = kind === 'generation' ? this.options.policy : this.options.passthroughPolicy;
      policy = createPolicy(name, this.paramsFor(name, kind === 'generation' ? this.overrides.get(pool) : undefined));
      this.policies.set(key, policy);
    }
    return policy;
  };

  /**
   * The policy choosing a disaggregated request's prefill backend in `pool` (pipeline/prefill.ts), with the pool's
   * learned figures as the generation policy has them (a learned prefill rate is the same engines' rate).
   */
  readonly prefillPolicyFor = (pool: string): RoutingPolicy => {
    const key = `prefill\u0000${pool}`;
    let policy = this.policies.get(key);
    if (!policy) {
      const name = this.options.prefillPolicy ?? this.options.policy;
      policy = createPolicy(name, this.paramsFor(name, this.overrides.get(pool)));
      this.policies.set(key, policy);
    }
    return policy;
  };

  applyLearned(pool: string, learned: LearnedCalibration): void {
    this.learned.set(pool, learned);
    if (this.options.calibratedFigures.length === 0) return;
    const next: Partial<Record<CalibratedParam, number>> = {};
    for (const [name, value] of Object.entries(calibratedOverrides(learned)) as [CalibratedParam, number][]) {
      if (this.options.calibratedFigures.includes(name)) next[name] = value;
    }
    const current = this.overrides.get(pool) ?? {};
    const moved = CALIBRATED_PARAMS.some((name) => {
      const before = current[name];
      const after = next[name];
      if (before === undefined || after === undefined) return before !== after;
      return Math.abs(after - before) > REBUILD_CHANGE * Math.abs(before);
    });
    if (!moved) return;
    let rebuilt: RoutingPolicy;
    try {
      rebuilt = createPolicy(this.options.policy, this.paramsFor(this.options.policy, next));
    } catch {
      // A learned figure the policy refuses (calibratedOverrides clamps them, so this is a bug
      // elsewhere) keeps the policy as it is rather than failing every request of the pool.
      return;
    }
    this.overrides.set(pool, next);
    this.policies.set(`generation\u0000${pool}`, rebuilt);
    // Built again at its next use, with the new figures.
    this.policies.delete(`prefill\u0000${pool}`);
  }

  /** The figures of a pool's generation policy, for /debug/route. */
  costModel(pool: string): PoolCostModel {
    const table = POLICIES[this.options.policy].params as Readonly<Record<string, { readonly default?: unknown }>>;
    const configuredParams = this.options.params[this.options.policy] ?? {};
    const configured: Partial<Record<CalibratedParam, number>> = {};
    for (const name of CALIBRATED_PARAMS) {
      if (!(name in table)) continue;
      const value = configuredParams[name] ?? table[name]?.default;
      if (typeof value === 'number') configured[name] = value;
    }
    const inUse = { ...configured };
    for (const [name, value] of Object.entries(this.overrides.get(pool) ?? {}) as [CalibratedParam, number][]) {
      if (name in inUse) inUse[name] = value;
    }
    return { configured, learned: this.learned.get(pool) ?? {}, inUse };
  }

  /** The prefill rate a pool's generation policy uses (ms per token), for the learn stage's queue samples (per response: no allocation). */
  prefillMsPerToken(pool: string): number {
    return (
      this.overrides.get(pool)?.prefillMsPerToken ??
      (this.configuredPrefillMsPerToken ??=
        this.costModel('').configured.prefillMsPerToken ?? DEFAULT_PREFILL_MS_PER_TOKEN)
    );
  }

  private paramsFor(
    name: PolicyName,
    overrides: Partial<Record<CalibratedParam, number>> | undefined,
  ): Record<string, Record<string, unknown>> {
    const params: Record<string, Record<string, unknown>> = { ...this.options.params } as Record<
      string,
      Record<string, unknown>
    >;
    if (overrides === undefined) return params;
    const table = POLICIES[name].params as Readonly<Record<string, unknown>>;
    const own: Record<string, unknown> = { ...(params[name] ?? {}) };
    for (const [param, value] of Object.entries(overrides)) if (param in table) own[param] = value;
    params[name] = own;
    return params;
  }
}
