import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { RedisStoreError } from './redis-store-error';
import {
  ADAPTER_LOAD_LUA,
  ADMIT_TENANT_LUA,
  APPLY_KV_EVENTS_LUA,
  CHANGE_API_KEYS_LUA,
  CHANGE_BACKEND_SET_LUA,
  CLEAR_BACKLOGS_LUA,
  FLOW_QUEUE_LUA,
  FORGET_BACKEND_LUA,
  KV_EVENTS_LEASE_LUA,
  LEARN_LUA,
  PREFILL_DONE_LUA,
  RECORD_BACKEND_SCRAPE_LUA,
  RECORD_OWNERSHIP_LUA,
  RELEASE_LUA,
  RENEW_LUA,
  RESERVE_LUA,
  SETTLE_TENANT_LUA,
  SNAPSHOT_LUA,
} from './lua/scripts.generated';

/** A single Redis or a Cluster client: both route EVALSHA by its first key. */
export type RedisClient = Redis | Cluster;

/** One Lua script: its source, the SHA-1 Redis caches it under, and how many KEYS it takes. */
export interface LuaScript {
  readonly name: string;
  readonly lua: string;
  readonly sha1: string;
  readonly numberOfKeys: number;
}

export function defineScript(name: string, lua: string, numberOfKeys: number): LuaScript {
  return { name, lua, sha1: createHash('sha1').update(lua, 'utf8').digest('hex'), numberOfKeys };
}

/**
 * Every script this package runs as it is (contracts in each file's header and in src/lua/README.md);
 * route.lua runs composed with a rule's Lua twin (route-call.ts routeScriptOf).
 */
export const SCRIPTS = {
  reserve: defineScript('reserve', RESERVE_LUA, 7),
  snapshot: defineScript('snapshot', SNAPSHOT_LUA, 6),
  release: defineScript('release', RELEASE_LUA, 8),
  renew: defineScript('renew', RENEW_LUA, 4),
  prefillDone: defineScript('prefill-done', PREFILL_DONE_LUA, 6),
  clearBacklogs: defineScript('clear-backlogs', CLEAR_BACKLOGS_LUA, 1),
  recordOwnership: defineScript('record-ownership', RECORD_OWNERSHIP_LUA, 4),
  forgetBackend: defineScript('forget-backend', FORGET_BACKEND_LUA, 2),
  learn: defineScript('learn', LEARN_LUA, 5),
  changeBackendSet: defineScript('change-backend-set', CHANGE_BACKEND_SET_LUA, 3),
  recordBackendScrape: defineScript('record-backend-scrape', RECORD_BACKEND_SCRAPE_LUA, 2),
  admitTenant: defineScript('admit-tenant', ADMIT_TENANT_LUA, 3),
  settleTenant: defineScript('settle-tenant', SETTLE_TENANT_LUA, 3),
  changeApiKeys: defineScript('change-api-keys', CHANGE_API_KEYS_LUA, 2),
  applyKvEvents: defineScript('apply-kv-events', APPLY_KV_EVENTS_LUA, 4),
  kvEventsLease: defineScript('kv-events-lease', KV_EVENTS_LEASE_LUA, 2),
  flowQueue: defineScript('flow-queue', FLOW_QUEUE_LUA, 6),
  adapterLoad: defineScript('adapter-load', ADAPTER_LOAD_LUA, 4),
} as const satisfies Record<string, LuaScript>;

/**
 * Runs a script by EVALSHA. When Redis answers NOSCRIPT (restarted, failed over to a replica that never
 * saw the script, SCRIPT FLUSH), it is sent once with EVAL, which also caches it again: one extra round
 * trip, then EVALSHA works. The check reads the reply's error code, the first word of a Redis error
 * (what ioredis itself does for `defineCommand`). Other failures become REDIS_STORE_ERR_SCRIPT_FAILED.
 * Keys and arguments go to ioredis as one array (never spread into a call: the argument count is
 * unbounded by the language only there). `replies: 'buffers'` answers bulk strings as Buffers (for
 * binary replies); integers stay numbers.
 */
export async function runScript(
  redis: RedisClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
  replies: 'strings' | 'buffers' = 'strings',
): Promise<unknown> {
  if (keys.length !== script.numberOfKeys) {
    throw new RangeError(`${script.name}.lua takes ${script.numberOfKeys} keys, got ${keys.length}`);
  }
  const send = (command: 'evalsha' | 'eval', head: string): Promise<unknown> => {
    const argv = ([head, keys.length] as (string | number)[]).concat(keys, args);
    return replies === 'buffers' ? redis.callBuffer(command, argv) : redis.call(command, argv);
  };
  try {
    try {
      return await send('evalsha', script.sha1);
    } catch (error) {
      if (!isNoScriptError(error)) throw error;
      return await send('eval', script.lua);
    }
  } catch (error) {
    throw new RedisStoreError(
      'REDIS_STORE_ERR_SCRIPT_FAILED',
      script.name,
      `${script.name}.lua failed: ${error instanceof Error ? error.message : String(error)}`,
      {
        cause: error,
      },
    );
  }
}

function isNoScriptError(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/** A reply that must be an array of `length` integers (Lua tables of numbers arrive as such). */
export function integerArrayReply(script: LuaScript, reply: unknown, length: number): number[] {
  if (
    !Array.isArray(reply) ||
    reply.length !== length ||
    !reply.every((value): value is number => Number.isInteger(value))
  ) {
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      script.name,
      `${script.name}.lua returned ${describe(reply)}, expected ${length} integers`,
    );
  }
  return reply;
}

/** A reply that must be one integer. */
export function integerReply(script: LuaScript, reply: unknown): number {
  if (typeof reply !== 'number' || !Number.isInteger(reply)) {
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      script.name,
      `${script.name}.lua returned ${describe(reply)}, expected an integer`,
    );
  }
  return reply;
}

function describe(reply: unknown): string {
  const text = JSON.stringify(reply) ?? String(reply);
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}
