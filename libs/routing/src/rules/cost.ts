/**
 * The cost rule's half in TypeScript: the codec of its Lua twin (cost.lua, same base name), which a
 * state store evaluates next to its state. The rule itself is `evaluateCost` in policies/cache-aware.ts
 * (the policy that owns it); cost.lua is its Lua twin, and libs/redis-store's rule-parity test holds
 * the two to the same decisions.
 *
 * The argument (cost.lua's header has the format): the policy's parameters and the request's figures
 * as one line of numbers (the parameters' part built once per policy instance), and the first
 * RANKED_BACKENDS of the request's rendezvous order. Only those are shipped, not a rank per backend, so
 * a call stays small in a big pool; the participants of a big pool's shortlist include the first few
 * of that order anyway, so a backend ranked beyond RANKED_BACKENDS decides a tie or a cold placement
 * only when every ranked one is out.
 *
 * The twin returns its choice, reason and whether the valve was lifted; the cost lines that explain
 * them are computed here, by the TypeScript rule on the figures the store read (the engine figures
 * included), unless `linesFromStore` asks the twin for its own (rule-parity compares the two). Packing
 * ten doubles per candidate and decoding the parameters as JSON were, together, ~5 % of a decision's instructions
 * in Redis at 16 backends (issue 28: 1,718 → 1,636 k); here the lines cost 9–12 µs, less than unpacking them did.
 */
import { backendRendezvousOrder } from '../policies/bounded-load-hash';
import { engineLoadReadingAs } from '../state/engine-figures';
import type {
  AtomicRule,
  AtomicRuleReply,
  Candidate,
  CostLine,
  CostOutcome,
  CostReason,
  RoutingDecision,
  RoutingRequest,
} from '../types';
import { COST_LUA } from './rules-lua.generated';
import { SIX_BIT_BASE, sixBitNumbers } from './six-bit';

/** Backends of the rendezvous order a call ranks (the rest rank after them, by configuration position). */
export const RANKED_BACKENDS = 32;

/**
 * The parameters cost.lua reads, in the order of its argument's first line (cost.lua reads them by
 * position: one pattern match, where Redis's Lua decoded them as JSON with cjson).
 */
export const COST_RULE_PARAMS = [
  'bytesPerToken',
  'prefillMsPerToken',
  'prefillWorkWeight',
  'queueMsPerRequest',
  'minMatchBlocks',
  'saturationInflight',
  'spreadAbs',
  'spreadRel',
  'coldLoadFactor',
  'engineWaitingMs',
  'kvFullMs',
] as const;

/** Doubles per candidate in the packed cost lines (cost.lua packCostLines), in this order. */
const COST_LINE_DOUBLES = 10;
const EXCLUSIONS: readonly CostLine['excluded'][] = [undefined, 'saturated', 'load-spread'];
const COST_REASONS: ReadonlySet<string> = new Set<CostReason>([
  'prefix-affinity',
  'spilled-from-saturated',
  'least-loaded',
  'load-guard',
  'cold-hash',
]);

/** What the cost rule needs from its policy. */
export interface CostRuleSides {
  /** The rule in TypeScript (evaluateCost with the policy's parameters): the cost lines of a store's outcome. */
  readonly evaluate: (request: RoutingRequest, candidates: readonly Candidate[]) => CostOutcome;
  /** The policy's decision of an outcome. */
  readonly explain: (outcome: CostOutcome) => RoutingDecision;
  /** The Lua twin returns its own cost lines (rule-parity compares them with `evaluate`'s); costs the store more. */
  readonly linesFromStore?: boolean;
}

/** cacheaware's atomic rule: `params` = its resolved parameters (COST_RULE_PARAMS are read from them). */
export function costRule(params: Readonly<Record<string, unknown>>, sides: CostRuleSides): AtomicRule<CostOutcome> {
  const paramsLine = parameterLine(params);
  // Token mode's requests count tokens (RoutingRequest.unit): cost.lua divides by one token per token.
  const tokenParamsLine = parameterLine({ ...params, bytesPerToken: 1 });
  const linesWanted = sides.linesFromStore === true ? 1 : 0;
  return {
    name: 'cost',
    lua: COST_LUA,
    readsDepths: true,
    encode(request, backends) {
      const ranked = backendRendezvousOrder(request.headHash, backends).slice(0, RANKED_BACKENDS);
      const params = request.unit === 'tokens' ? tokenParamsLine : paramsLine;
      const numbers = `${request.textBytes} ${request.blockSizeBytes} ${request.maxTokens ?? 0} ${linesWanted}`;
      const adapter = request.adapterWaitMs == null ? '' : `\n${adapterLine(request.adapterWaitMs, backends)}`;
      return { argument: `${params}\n${numbers}\n${rankLine(ranked, backends.length)}${adapter}`, preferred: ranked };
    },
    decode: (reply) => decodeCostReply(reply, sides.evaluate),
    explain: sides.explain,
  };
}

/**
 * The argument's first line: COST_RULE_PARAMS' values, space-separated; JavaScript's shortest round-trip decimals,
 * which strtod reads back exactly. A line of its own, the same in every call of a router (per unit), so cost.lua
 * parses it once and looks it up after.
 */
function parameterLine(params: Readonly<Record<string, unknown>>): string {
  return COST_RULE_PARAMS.map((name) => {
    const value = params[name];
    if (typeof value !== 'number' || !Number.isFinite(value))
      throw new TypeError(`the cost rule's parameter ${name} must be a finite number, got ${String(value)}`);
    return String(value);
  }).join(' ');
}

/**
 * The argument's third line: `ranked` (0-based indices into the pool's `memberCount` backends) as 1-based positions
 * in the six-bit form (six-bit.ts: cost.lua reads the whole line with one string.byte).
 */
export function rankLine(ranked: readonly number[], memberCount: number): string {
  return sixBitNumbers(
    ranked.map((index) => index + 1),
    memberCount,
  );
}

/**
 * The argument's fourth line, for a LoRA adapter's request: `<position>:<ms>` per backend whose adapter wait is not 0
 * (position 1-based among `backends`, base 36; ms as a decimal), comma-separated.
 */
function adapterLine(waits: ReadonlyMap<string, number>, backends: readonly { readonly id: string }[]): string {
  const entries: string[] = [];
  backends.forEach((backend, index) => {
    const ms = waits.get(backend.id) ?? 0;
    if (ms > 0) entries.push(`${(index + 1).toString(36)}:${ms}`);
  });
  return entries.join(',');
}

/**
 * cost.lua's detail: [reason, 1 when the valve was lifted, its packed cost lines or '' when not asked for, a cold
 * placement's order or ''].
 */
function decodeCostReply(reply: AtomicRuleReply, evaluate: CostRuleSides['evaluate']): CostOutcome {
  const { candidates, chosen, detail } = reply;
  const [reason, valveLifted, packedLines, coldOrder] = detail;
  if (reason === undefined || packedLines === undefined || valveLifted === undefined || coldOrder === undefined) {
    throw new TypeError(`cost.lua returned ${detail.length} detail values, expected 4`);
  }
  const reasonText = reason.toString('utf8');
  if (!COST_REASONS.has(reasonText))
    throw new TypeError(`cost.lua returned an unknown reason ${JSON.stringify(reasonText)}`);
  return {
    kind: 'cost',
    candidates,
    chosen,
    reason: reasonText as CostReason,
    valveLifted: valveLifted.toString('latin1') === '1',
    lines:
      packedLines.length > 0
        ? costLines(packedLines, candidates.length)
        : withColdOrder(linesAsRead(reply, evaluate), coldOrder.toString('latin1')),
  };
}

/**
 * The cold placement's ranks as cost.lua tried them (`order`: each candidate index, 1-based, in 3 six-bit characters
 * from '0'; '' = no cold placement). Past RANKED_BACKENDS cost.lua ranks by configuration position, where the
 * TypeScript rule ranks by the full rendezvous order: the explanation shows the order the choice was made in.
 */
function withColdOrder(lines: readonly CostLine[], order: string): readonly CostLine[] {
  if (order === '') return lines;
  if (order.length % 3 !== 0) throw new TypeError(`cost.lua returned a cold order of ${order.length} characters`);
  const ranked = lines.slice();
  for (let at = 0, hashRank = 0; at < order.length; at += 3, hashRank++) {
    const digit = (offset: number): number => order.charCodeAt(at + offset) - SIX_BIT_BASE;
    const index = (digit(0) * 64 + digit(1)) * 64 + digit(2) - 1;
    const line = ranked[index];
    if (line === undefined) throw new TypeError(`cost.lua returned a cold order naming candidate ${index + 1}`);
    ranked[index] = { ...line, cold: { hashRank, bound: line.cold?.bound ?? 0 } };
  }
  return ranked;
}

/**
 * The cost lines of the figures the store read: the TypeScript rule on the store's candidates, each with
 * the engine figures the store's evaluation read (another replica may have stored fresher ones than this
 * replica's own). The choice and reason stay the store's: the lease is taken there.
 */
function linesAsRead(reply: AtomicRuleReply, evaluate: CostRuleSides['evaluate']): readonly CostLine[] {
  const asRead = reply.candidates.map((candidate, index) => {
    const figures = reply.engineFigures[index];
    return figures === undefined ? candidate : { ...candidate, engine: engineLoadReadingAs(figures) };
  });
  return evaluate(reply.request, asRead).lines;
}

function costLines(packed: Buffer, candidateCount: number): CostLine[] {
  if (packed.length !== 8 * COST_LINE_DOUBLES * candidateCount) {
    throw new TypeError(`cost.lua returned ${packed.length} bytes of cost lines for ${candidateCount} candidates`);
  }
  const lines: CostLine[] = [];
  for (let index = 0, at = 0; index < candidateCount; index++, at += 8 * COST_LINE_DOUBLES) {
    const read = (field: number): number => packed.readDoubleLE(at + 8 * field);
    const excluded = EXCLUSIONS[read(6)];
    const hashRank = read(7);
    const line: CostLine = {
      prefillMs: read(0),
      backlogMs: read(1),
      queueMs: read(2),
      waitingMs: read(3),
      kvMs: read(4),
      totalMs: read(5),
      adapterMs: read(9),
    };
    lines.push({
      ...line,
      ...(excluded === undefined ? {} : { excluded }),
      ...(hashRank < 0 ? {} : { cold: { hashRank, bound: read(8) } }),
    });
  }
  return lines;
}
