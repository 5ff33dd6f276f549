/** Stable codes of this package's errors (`<APP>_ERR_<WHAT>`, as fastify's `FST_ERR_*`). Branch on `code`, never on the message. */
export type RedisStoreErrorCode =
  /** A script failed in Redis or on the way (timeout, connection down, offline queue disabled): `cause` holds the ioredis error. */
  | 'REDIS_STORE_ERR_SCRIPT_FAILED'
  /** A script answered with a shape its decoder does not know: the Lua and the TypeScript disagree. */
  | 'REDIS_STORE_ERR_BAD_REPLY';

export class RedisStoreError extends Error {
  override readonly name = 'RedisStoreError';

  constructor(
    readonly code: RedisStoreErrorCode,
    /** The script's name (`reserve`, `snapshot`, …). */
    readonly script: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
