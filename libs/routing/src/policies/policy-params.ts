/**
 * A policy's parameters, declared once as a table (one row per parameter: default, unit, range, doc,
 * the router config key that sets it). Everything else derives from the table: the resolved
 * parameter type (`ParamsOf`), the defaults, the range checks at creation (a bad value fails when the
 * policy is created, at startup, never in the middle of a decision), the router's config keys, flags,
 * env vars and their docs (apps/router: `policyConfigFields`), and the mapping from config to
 * parameters (`policyParamsFromSettings` in policy-registry.ts).
 */

/** A numeric parameter. */
export interface NumberParamSpec {
  readonly default: number;
  /** Inclusive lower bound, or exclusive with `exclusiveMin`. */
  readonly min: number;
  readonly exclusiveMin?: boolean;
  /** Inclusive upper bound; none when omitted. */
  readonly max?: number;
  readonly integer?: boolean;
  /** Unit of the value ('ms', 'tokens', 'blocks', 'requests', 'bytes'); '' for counts and ratios without one. */
  readonly unit: string;
  /** What it does, one line (the config docs show it after the policy's name). */
  readonly doc: string;
  /**
   * The router config key (file key; its flag and env var derive from it) that sets this parameter;
   * absent: not configurable. Several policies may share a key (e.g. `minMatchBlocks`): unset, each
   * keeps its own default.
   */
  readonly configKey?: string;
}

/** A parameter that takes one of a few words. */
export interface ChoiceParamSpec {
  readonly default: string;
  readonly values: readonly [string, ...string[]];
  readonly doc: string;
  readonly configKey?: string;
}

export type ParamSpec = NumberParamSpec | ChoiceParamSpec;

/** A policy's parameters by name. Declare with `as const satisfies ParamTable` so `ParamsOf` sees the literal values. */
export type ParamTable = { readonly [name: string]: ParamSpec };

/** The value type of one row: a number, or the union of a choice's words. */
export type ParamValue<S extends ParamSpec> = S extends { readonly values: readonly (infer V)[] } ? V : number;

/** The resolved parameters a table declares. */
export type ParamsOf<T extends ParamTable> = { readonly [K in keyof T]: ParamValue<T[K]> };

export function isChoiceParam(spec: ParamSpec): spec is ChoiceParamSpec {
  return 'values' in spec;
}

/** Every parameter at its default. */
export function defaultsOf<T extends ParamTable>(table: T): ParamsOf<T> {
  const defaults: Record<string, number | string> = {};
  for (const [name, spec] of Object.entries(table)) defaults[name] = spec.default;
  return defaults as ParamsOf<T>;
}

/**
 * The table's defaults overlaid with the caller's defined values (an explicit `undefined` keeps the
 * default), each checked against its row. Throws a RangeError naming the parameter otherwise; an
 * unknown name is an error too (a typo must not pass silently).
 */
export function resolveParams<T extends ParamTable>(table: T, overrides: Partial<ParamsOf<T>> = {}): ParamsOf<T> {
  const resolved: Record<string, unknown> = { ...defaultsOf(table) };
  for (const [name, value] of Object.entries(overrides)) {
    if (value === undefined) continue;
    const spec = table[name];
    if (spec === undefined) throw new RangeError(`unknown parameter ${name} (known: ${Object.keys(table).join(', ')})`);
    checkParam(name, spec, value);
    resolved[name] = value;
  }
  return resolved as ParamsOf<T>;
}

/** Throws a RangeError naming the parameter unless `value` is within its row. */
export function checkParam(name: string, spec: ParamSpec, value: unknown): void {
  if (isChoiceParam(spec)) {
    if (typeof value !== 'string' || !spec.values.includes(value))
      throw new RangeError(`${name} must be one of ${spec.values.join(', ')}, got ${String(value)}`);
    return;
  }
  const max = spec.max ?? Number.POSITIVE_INFINITY;
  const aboveMin = typeof value === 'number' && (spec.exclusiveMin === true ? value > spec.min : value >= spec.min);
  const valid =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    aboveMin &&
    value <= max &&
    (spec.integer !== true || Number.isInteger(value));
  if (!valid) throw new RangeError(`${name} must be ${describeRange(spec)}, got ${String(value)}`);
}

/** The range in words: "a number ≥ 0", "an integer in [1, 10000]", "a number > 0". */
export function describeRange(spec: NumberParamSpec): string {
  const kind = spec.integer === true ? 'an integer' : 'a number';
  if (spec.max !== undefined) return `${kind} in ${spec.exclusiveMin === true ? '(' : '['}${spec.min}, ${spec.max}]`;
  return `${kind} ${spec.exclusiveMin === true ? '>' : '≥'} ${spec.min}`;
}
