import { createHash } from 'node:crypto';
import { Cluster, type Redis } from 'ioredis';
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
  /** A script with a '--#body' line also runs as a Redis Function (runScript): its name and library. */
  readonly asFunction?: RedisFunction;
}

/** A script's Redis Function form: a library of one function, named after the script and its SHA-1. */
export interface RedisFunction {
  readonly name: string;
  /** FUNCTION LOAD's source: the script's definitions once, its body as the function. */
  readonly library: string;
}

/**
 * Where a script's definitions (its included helpers, constants) end and its body begins. EVAL runs a
 * script's every line on every call, so the helpers' closures are made anew each time (~40k instructions
 * for route.lua's, ~18k for release.lua's: callgrind of those lines alone, looped in Lua 5.1, issue 28); a
 * Redis Function's library runs them once, at its first call, and each call runs the body only.
 */
const BODY_LINE = /^--#body$/m;

export function defineScript(name: string, lua: string, numberOfKeys: number): LuaScript {
  const sha1 = createHash('sha1').update(lua, 'utf8').digest('hex');
  const body = BODY_LINE.exec(lua);
  if (body === null) return { name, lua, sha1, numberOfKeys };
  // Named by the source's digest: routers of two versions sharing a Redis during an upgrade each call
  // their own (docs/redis.md: listing and deleting old ones).
  const functionName = `kvroute_${name.replace(/[^A-Za-z0-9]+/g, '_')}_${sha1.slice(0, 16)}`;
  // A library's own lines run at FUNCTION LOAD, where Redis 7.0 gives them no globals but `redis` (no
  // `string`, `math`, `tonumber`): the definitions run at the first call instead, and make the body, which
  // every later call runs.
  const library = [
    `#!lua name=${functionName}`,
    'local run',
    'local function define()',
    lua.slice(0, body.index),
    'return function(KEYS, ARGV)',
    lua.slice(body.index),
    'end',
    'end',
    `redis.register_function('${functionName}', function(KEYS, ARGV)`,
    '  if run == nil then run = define() end',
    '  return run(KEYS, ARGV)',
    'end)',
    '',
  ].join('\n');
  return { name, lua, sha1, numberOfKeys, asFunction: { name: functionName, library } };
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
 * Runs a script: as its Redis Function (FCALL) when it has one, else by EVALSHA.
 *
 * FCALL: when Redis answers that the function is not found (a fresh or restarted Redis without
 * persistence, FUNCTION FLUSH, a router of a new version), the library is loaded (FUNCTION LOAD REPLACE,
 * on every master of a cluster, once however many calls found it missing) and the call sent again; a load
 * that fails leaves the call to EVALSHA. A server without functions (before Redis 7, FUNCTION renamed
 * away) or a user without them answers "unknown command" or NOPERM: that client runs scripts by EVALSHA
 * from then on (viaFunction).
 *
 * EVALSHA: when Redis answers NOSCRIPT (restarted, failed over to a replica that never saw the script,
 * SCRIPT FLUSH), it is sent once with EVAL, which also caches it again: one extra round trip, then
 * EVALSHA works. The checks read the reply's error, whose first word is its code (what ioredis itself does
 * for `defineCommand`). Other failures become REDIS_STORE_ERR_SCRIPT_FAILED.
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
  const send = (command: 'fcall' | 'evalsha' | 'eval', head: string): Promise<unknown> => {
    const argv = ([head, keys.length] as (string | number)[]).concat(keys, args);
    return replies === 'buffers' ? redis.callBuffer(command, argv) : redis.call(command, argv);
  };
  const asFunction = script.asFunction;
  try {
    if (asFunction !== undefined && !withoutFunctions.has(redis)) {
      const answered = await viaFunction(redis, asFunction, send);
      if (answered.done) return answered.reply;
    }
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

type FunctionAnswer = { readonly done: true; readonly reply: unknown } | { readonly done: false };

/**
 * The call as a Redis Function; `done: false` leaves it to EVALSHA: a server that cannot run functions for
 * this client (no FCALL or FUNCTION command, an ACL user without them: that client uses EVALSHA from then
 * on), or a library that could not be loaded (FUNCTION LOAD refused: out of memory, too few replicas to
 * write; in a cluster, the key's master not reached). Errors of the script itself are thrown.
 */
async function viaFunction(
  redis: RedisClient,
  asFunction: RedisFunction,
  send: (command: 'fcall', head: string) => Promise<unknown>,
): Promise<FunctionAnswer> {
  try {
    return { done: true, reply: await send('fcall', asFunction.name) };
  } catch (error) {
    if (cannotRunFunctions(error)) {
      withoutFunctions.add(redis);
      return { done: false };
    }
    if (!isFunctionMissing(error)) throw error;
  }
  const load = await loadFunction(redis, asFunction);
  if (load !== 'loaded') {
    if (load === 'never') withoutFunctions.add(redis);
    return { done: false };
  }
  try {
    return { done: true, reply: await send('fcall', asFunction.name) };
  } catch (error) {
    if (isFunctionMissing(error) || cannotRunFunctions(error)) return { done: false };
    throw error;
  }
}

/** Clients that run scripts by EVALSHA only (their server or user cannot run functions). */
const withoutFunctions = new WeakSet<RedisClient>();
/** Libraries being loaded, per client and function: the calls that find one missing wait for one load. */
const loading = new WeakMap<RedisClient, Map<string, Promise<LoadOutcome>>>();

/** A load's outcome: on at least one server; on none (for now); on none, and never can be (no command, no permission). */
type LoadOutcome = 'loaded' | 'failed' | 'never';

/**
 * FUNCTION LOAD REPLACE of `asFunction`'s library: on the server, or on every master of a cluster (a master
 * that fails does not stop the others: the call sent again finds out whether its own master has it).
 * Never rejects.
 */
function loadFunction(redis: RedisClient, asFunction: RedisFunction): Promise<LoadOutcome> {
  let byName = loading.get(redis);
  if (byName === undefined) {
    byName = new Map();
    loading.set(redis, byName);
  }
  const pending = byName.get(asFunction.name);
  if (pending !== undefined) return pending;
  const servers = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const settled = Promise.allSettled(
    servers.map((server) => server.call('FUNCTION', ['LOAD', 'REPLACE', asFunction.library])),
  )
    .then((results): LoadOutcome => {
      if (results.some((result) => result.status === 'fulfilled')) return 'loaded';
      const never = results.every((result) => result.status === 'rejected' && cannotRunFunctions(result.reason));
      return never && results.length > 0 ? 'never' : 'failed';
    })
    .finally(() => byName.delete(asFunction.name));
  byName.set(asFunction.name, settled);
  return settled;
}

/**
 * Loads a script into Redis ahead of its first call (SCRIPT LOAD, and FUNCTION LOAD of its function form
 * if it has one; on every master of a cluster), so that call finds it: for tests that count calls.
 */
export async function preloadScript(redis: RedisClient, script: LuaScript): Promise<void> {
  const servers = redis instanceof Cluster ? redis.nodes('master') : [redis];
  await Promise.all(servers.map((server) => server.call('SCRIPT', ['LOAD', script.lua])));
  if (script.asFunction !== undefined && (await loadFunction(redis, script.asFunction)) !== 'loaded')
    throw new Error(`${script.name}: FUNCTION LOAD failed`);
}

function isFunctionMissing(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('ERR Function not found');
}

/**
 * FCALL or FUNCTION unknown (before Redis 7.0, or renamed away), or the command not permitted to this client's user.
 * Only a refused command: an ACL refusing a key or a channel also answers NOPERM ("… to access one of the keys …"),
 * which EVALSHA would meet as well, and which must not turn functions off for the client.
 */
function cannotRunFunctions(error: unknown): boolean {
  return (
    error instanceof Error && (error.message.startsWith('ERR unknown command') || COMMAND_REFUSED.test(error.message))
  );
}

/** Redis's ACL error for a command the user may not run: "NOPERM this user has no permissions to run the 'fcall' command". */
const COMMAND_REFUSED = /^NOPERM .*\brun the '/;

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
