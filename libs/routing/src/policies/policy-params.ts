/**
 * Resolving a policy's parameters: defaults for what the caller left out, then a range check, so a
 * bad value fails when the policy is created (at startup), never in the middle of a decision.
 */

export interface ParamRange {
  readonly min: number;
  /** Inclusive upper bound; Infinity when omitted. */
  readonly max?: number;
  readonly integer?: boolean;
}

/** `defaults` overlaid with the caller's defined values (an explicit `undefined` keeps the default). */
export function withDefaults<P extends object>(defaults: P, overrides: Partial<P>): P {
  const resolved = { ...defaults };
  for (const key of Object.keys(overrides) as (keyof P)[]) {
    const value = overrides[key];
    if (value !== undefined) resolved[key] = value as P[keyof P];
  }
  return resolved;
}

/** Throws a RangeError naming the parameter unless `value` is a finite number within `range`. */
export function checkParamRange(name: string, value: number, range: ParamRange): void {
  const max = range.max ?? Number.POSITIVE_INFINITY;
  const valid = Number.isFinite(value) && value >= range.min && value <= max && (range.integer !== true || Number.isInteger(value));
  if (!valid) {
    const kind = range.integer === true ? 'an integer' : 'a number';
    throw new RangeError(`${name} must be ${kind} in [${range.min}, ${max}], got ${value}`);
  }
}
