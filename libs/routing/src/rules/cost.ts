/**
 * The cost rule's half in TypeScript: the codec of its Lua twin (cost.lua, same base name), which a
 * state store evaluates next to its state. The rule itself is `evaluateCost` in policies/cache-aware.ts
 * (the policy that owns it); cost.lua is its Lua twin, and libs/redis-store's rule-parity test holds
 * the two to the same decisions.
 *
 * The argument (cost.lua's header has the format): the policy's parameters as JSON (built once per
 * policy instance), the request's figures, and the first RANKED_BACKENDS of the request's rendezvous
 * order. Only those are shipped, not a rank per backend, so a call stays small in a big pool; the
 * participants of a big pool's shortlist include the first few of that order anyway, so a backend
 * ranked beyond RANKED_BACKENDS decides a tie or a cold placement only when every ranked one is out.
 */
import { backendRendezvousOrder } from '../policies/bounded-load-hash';
import type { AtomicRule, AtomicRuleReply, CostLine, CostOutcome, CostReason, RoutingDecision } from '../types';
import { COST_LUA } from './rules-lua.generated';

/** Backends of the rendezvous order a call ranks (the rest rank after them, by configuration position). */
export const RANKED_BACKENDS = 32;

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

/**
 * cacheaware's atomic rule: `params` = its resolved parameters (cost.lua reads them by name),
 * `explain` = its decision of an outcome.
 */
export function costRule(
  params: Readonly<Record<string, unknown>>,
  explain: (outcome: CostOutcome) => RoutingDecision,
): AtomicRule<CostOutcome> {
  const packedParams = JSON.stringify(params);
  // Token mode's requests count tokens (RoutingRequest.unit): cost.lua divides by one token per token.
  const packedTokenParams = JSON.stringify({ ...params, bytesPerToken: 1 });
  return {
    name: 'cost',
    lua: COST_LUA,
    readsDepths: true,
    encode(request, backends) {
      const ranked = backendRendezvousOrder(request.headHash, backends).slice(0, RANKED_BACKENDS);
      const figures = `${request.textBytes} ${request.blockSizeBytes} ${request.maxTokens ?? 0}`;
      const adapter = request.adapterWaitMs == null ? '' : `\n${adapterLine(request.adapterWaitMs, backends)}`;
      return {
        argument: `${request.unit === 'tokens' ? packedTokenParams : packedParams}\n${figures}\n${rankLine(ranked, backends.length)}${adapter}`,
        preferred: ranked,
      };
    },
    decode: decodeCostReply,
    explain,
  };
}

/** The characters '0' (48) to 'o' (111): 6 bits each, none of them a line's end. */
const RANK_DIGIT_BASE = 48;

/**
 * The argument's third line: `ranked` (0-based indices into the pool's `memberCount` backends) as 1-based positions
 * of a fixed width: its digit first, then each position in that many 6-bit characters (cost.lua reads the whole line
 * with one string.byte).
 */
export function rankLine(ranked: readonly number[], memberCount: number): string {
  let width = 1;
  while (64 ** width <= memberCount) width++;
  let line = String(width);
  for (const index of ranked) {
    const position = index + 1;
    for (let shift = width - 1; shift >= 0; shift--)
      line += String.fromCharCode(RANK_DIGIT_BASE + (Math.floor(position / 64 ** shift) % 64));
  }
  return line;
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

/** cost.lua's detail: [reason, packed cost lines, 1 when the valve was lifted]. */
function decodeCostReply({ candidates, chosen, detail }: AtomicRuleReply): CostOutcome {
  const [reason, packedLines, valveLifted] = detail;
  if (reason === undefined || packedLines === undefined || valveLifted === undefined) {
    throw new TypeError(`cost.lua returned ${detail.length} detail values, expected 3`);
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
    lines: costLines(packedLines, candidates.length),
  };
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
