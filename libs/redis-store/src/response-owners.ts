import type { BackendId, ResponseOwnerStore } from '@kvroute/routing';
import { DEFAULT_KEY_NAMESPACE, responseOwnerKey } from './keys';
import type { RedisClient } from './scripts';

export interface RedisResponseOwnersOptions {
  readonly redis: RedisClient;
  /** How long an entry lives after it was remembered, ms (PX). */
  readonly ttlMs: number;
  readonly namespace?: string;
}

/**
 * The response-id → backend map in Redis, shared by every router replica: one key per response and
 * scope (keys.ts `responseOwnerKey`), each call one single-key command (SET PX, GET, DEL), so no
 * script is needed and each runs on one Redis Cluster slot. Errors reach the caller (the router falls
 * back to its local map).
 */
export class RedisResponseOwners implements ResponseOwnerStore {
  readonly #redis: RedisClient;
  readonly #ttlMs: number;
  readonly #namespace: string;

  constructor(options: RedisResponseOwnersOptions) {
    this.#redis = options.redis;
    this.#ttlMs = options.ttlMs;
    this.#namespace = options.namespace ?? DEFAULT_KEY_NAMESPACE;
  }

  async remember(scope: string, responseId: string, backendId: BackendId): Promise<void> {
    await this.#redis.set(responseOwnerKey(scope, responseId, this.#namespace), backendId, 'PX', this.#ttlMs);
  }

  async ownerOf(scope: string, responseId: string): Promise<BackendId | null> {
    return this.#redis.get(responseOwnerKey(scope, responseId, this.#namespace));
  }

  async forget(scope: string, responseId: string): Promise<void> {
    await this.#redis.del(responseOwnerKey(scope, responseId, this.#namespace));
  }
}
