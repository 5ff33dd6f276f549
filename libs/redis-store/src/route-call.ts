import { sixBitNumbers, type AtomicRule, type BlockHash, type Candidate, type EngineFigures } from '@kvroute/routing';
import { decisionKeys, packBlockHashes, type PoolKeys } from './keys';
import { ROUTE_LUA } from './lua/scripts.generated';
import { engineFiguresOfField, MEMBER_SET_TTL_MS, UNKNOWN_ENGINE, type MemberSet } from './pool-members';
import { RedisStoreError } from './redis-store-error';
import { defineScript, runScript, type LuaScript, type RedisClient } from './scripts';
import type { Shortlist } from './shortlist';

/**
 * route.lua's call and reply (its header has the contract). The store knows no rule: each rule's Lua
 * twin is spliced into route.lua at its '--#rule' line, one script per rule, and its argument and
 * detail pass through as the rule's codec made them.
 */

/** Where route.lua takes its rule. */
const RULE_LINE = /^--#rule$/m;
/** route.lua composed with each rule's Lua twin, by the twin's source. */
const routeScripts = new Map<string, LuaScript>();

/** The route script of `rule`: route.lua with the rule's Lua twin in place of its '--#rule' line. */
export function routeScriptOf(rule: AtomicRule): LuaScript {
  let script = routeScripts.get(rule.lua);
  if (script === undefined) {
    script = defineScript(
      `route:${rule.name}`,
      ROUTE_LUA.replace(RULE_LINE, () => rule.lua.trimEnd()),
      9,
    );
    routeScripts.set(rule.lua, script);
  }
  return script;
}

/** The store's settings a route call carries. */
export interface RouteSettings {
  readonly nowMs: number;
  readonly blockIdleTtlMs: number;
  readonly maxBlocksPerPool: number;
  readonly leaseTtlMs: number;
}

/** One decision's call. */
export interface RouteCall {
  readonly keys: PoolKeys;
  readonly rule: AtomicRule;
  readonly ruleArgument: string;
  readonly leaseId: string;
  readonly blockHashes: readonly BlockHash[];
  /** Record the chosen backend's ownership of the blocks, at most this many new ones (0: do not). */
  readonly recordAtMost: number;
  /** null: every member takes part. */
  readonly shortlist: Shortlist | null;
  readonly members: MemberSet;
  /** Store the member set first (it is not stored, or may not be). */
  readonly storeMembers: boolean;
  /** Engine figures to store first (PoolMembers.engineFiguresToSend). */
  readonly engineFigures: string;
  /** Backlogs to clear first (BacklogClears.take): '' or '<backend>\t<lease>\n' each. */
  readonly backlogClears: string;
  /** Blocks the depth search reads first (RoutingRequest.boundaryBlocks: 1-based, ascending); a hint. */
  readonly boundaryBlocks: readonly number[];
}

/** A participant's figures as route.lua read them. */
export type Figures = Pick<Candidate, 'inflight' | 'matchBlocks' | 'pendingPrefillTokens' | 'matchRecordedAtMs'>;

export type RouteReply =
  /** The member set named is not stored: nothing was done; call again with it. */
  | { readonly kind: 'members-unknown' }
  | {
      readonly kind: 'decided';
      /** 0-based, among the participants. */
      readonly chosen: number;
      readonly inflightAfter: number;
      /** The rule reported every participant saturated. */
      readonly saturated: boolean;
      /** When recording: the leading blocks the chosen backend now holds in the current generation. */
      readonly recordedTo: number;
      /** The members (0-based, ascending) that took part; `chosen` and `figures` are theirs. */
      readonly participants: readonly number[];
      readonly detail: readonly Buffer[];
      readonly figures: readonly Figures[];
      /** The participants' engine figures as stored (unknown where none is). */
      readonly engineFigures: readonly EngineFigures[];
    };

/** Runs route.lua for one decision. */
export async function runRoute(redis: RedisClient, settings: RouteSettings, call: RouteCall): Promise<RouteReply> {
  const { keys, shortlist } = call;
  const script = routeScriptOf(call.rule);
  const args: (string | number)[] = [
    settings.nowMs,
    keys.prefix,
    settings.blockIdleTtlMs,
    settings.maxBlocksPerPool,
    call.leaseId,
    settings.leaseTtlMs,
    call.recordAtMost,
    packBlockHashes(call.blockHashes),
    call.rule.readsDepths ? 1 : 0,
    call.ruleArgument,
    shortlist === null ? '' : `${shortlist.owners};${shortlist.picks.map((index) => index + 1).join(',')}`,
    call.storeMembers ? call.members.records : '',
    MEMBER_SET_TTL_ARG,
    call.engineFigures,
    call.backlogClears,
    call.rule.readsDepths ? boundaryBlocksArgument(call.boundaryBlocks, call.blockHashes.length) : '',
  ];
  const routeKeys = [...decisionKeys(keys), keys.members(call.members.version), keys.engine];
  const reply = await runScript(redis, script, routeKeys, args, 'buffers');
  return decodeRouteReply(script, reply, call.members.count);
}

/** ARGV[16]: the boundary blocks within the chain (1..blockCount): those outside it dropped here, as route.lua drops them too (a hint is never trusted). */
function boundaryBlocksArgument(blocks: readonly number[], blockCount: number): string {
  const within = blocks.filter((block) => Number.isInteger(block) && block >= 1 && block <= blockCount);
  return within.length === 0 ? '' : sixBitNumbers(within, blockCount);
}

/** Passed as text like every argument. */
const MEMBER_SET_TTL_ARG = String(MEMBER_SET_TTL_MS);

const HEADER = 6;
/** Values per participant after the detail. */
const PER_PARTICIPANT = 5;

function decodeRouteReply(script: LuaScript, reply: unknown, memberTotal: number): RouteReply {
  const bad = (expected: string) =>
    new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      script.name,
      `${script.name} returned an unexpected reply: ${expected}`,
    );
  if (Array.isArray(reply) && reply.length === 1 && reply[0] === -1) return { kind: 'members-unknown' };
  if (!Array.isArray(reply) || reply.length < HEADER) throw bad(`expected at least ${HEADER} values`);
  const [chosen, inflightAfter, saturated, recordedTo, positions, detailCount] = reply as unknown[];
  if (![chosen, inflightAfter, saturated, recordedTo, detailCount].every(Number.isInteger))
    throw bad('non-integer header');
  if (!Buffer.isBuffer(positions)) throw bad('participants must be a string');
  const participants =
    positions.length === 0
      ? Array.from({ length: memberTotal }, (_, index) => index)
      : positions
          .toString('latin1')
          .split(',')
          .map((position) => Number(position) - 1);
  if (participants.some((index) => !Number.isInteger(index) || index < 0 || index >= memberTotal)) {
    throw bad(`participants ${positions.toString('latin1').slice(0, 80)} of ${memberTotal}`);
  }
  const detailEnd = HEADER + (detailCount as number);
  const detail = reply
    .slice(HEADER, detailEnd)
    .map((value: unknown) => (Buffer.isBuffer(value) ? value : Buffer.from(String(value))));
  if (reply.length !== detailEnd + PER_PARTICIPANT * participants.length)
    throw bad(`expected ${detailEnd + PER_PARTICIPANT * participants.length} values`);
  const figures: Figures[] = [];
  const engineFigures: EngineFigures[] = [];
  for (let at = detailEnd; at < reply.length; at += PER_PARTICIPANT) {
    const [inflight, pendingPrefillTokens, matchBlocks, recordedAtValue, engineField] = reply.slice(
      at,
      at + PER_PARTICIPANT,
    ) as unknown[];
    // The ms travels as the decimal string the owner index stores (no conversion in Lua), or -1.
    const recordedAt = Buffer.isBuffer(recordedAtValue) ? Number(recordedAtValue.toString('latin1')) : recordedAtValue;
    // A field that is not one (nothing this version writes) reads as unknown, as route.lua reads it: the lease is
    // taken by now, and a refused reply would fail every decision over that backend while the field stays.
    const engine =
      (Buffer.isBuffer(engineField) && engineFiguresOfField(engineField.toString('latin1'))) || UNKNOWN_ENGINE;
    if (![inflight, pendingPrefillTokens, matchBlocks, recordedAt].every(Number.isInteger)) {
      throw bad(`bad figures of participant ${figures.length + 1}`);
    }
    const matchRecordedAtMs =
      (matchBlocks as number) > 0 && (recordedAt as number) >= 0 ? (recordedAt as number) : null;
    figures.push({
      inflight: inflight as number,
      pendingPrefillTokens: pendingPrefillTokens as number,
      matchBlocks: matchBlocks as number,
      matchRecordedAtMs,
    });
    engineFigures.push(engine);
  }
  if ((chosen as number) < 1 || (chosen as number) > participants.length)
    throw bad(`chosen ${String(chosen)} of ${participants.length}`);
  return {
    kind: 'decided',
    chosen: (chosen as number) - 1,
    inflightAfter: inflightAfter as number,
    saturated: saturated === 1,
    recordedTo: recordedTo as number,
    participants,
    detail,
    figures,
    engineFigures,
  };
}
