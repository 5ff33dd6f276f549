import { z } from 'zod';

/**
 * A TCP port option (flag, env or file value coerced to an integer in 0–65535; 0 = any free port where
 * listening, "none" where a feature reads it so), for the apps' config schemas.
 */
export function portOption(): z.ZodCoercedNumber<unknown> {
  return z.coerce.number().int().min(0).max(65_535);
}
