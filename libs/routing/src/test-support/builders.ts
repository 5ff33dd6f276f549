import type { Candidate, EngineLoad, PolicyContext, RoutingRequest } from '../types';
import { seededRandom } from '@kvroute/workloads';

/** Test builders with sensible defaults: override only what a test is about. */

export function aCandidate(
  id: string,
  fields: {
    inflight?: number;
    matchBlocks?: number;
    weight?: number;
    pendingPrefillTokens?: number;
    engine?: EngineLoad | null;
  } = {},
): Candidate {
  return {
    backend: { id, weight: fields.weight ?? 1 },
    inflight: fields.inflight ?? 0,
    matchBlocks: fields.matchBlocks ?? 0,
    pendingPrefillTokens: fields.pendingPrefillTokens ?? 0,
    ...(fields.engine === undefined ? {} : { engine: fields.engine }),
  };
}

/** An engine's reported load: idle with 10,000 tokens of KV unless told otherwise. */
export function anEngine(fields: Partial<EngineLoad> = {}): EngineLoad {
  return {
    kvUsage: fields.kvUsage === undefined ? 0 : fields.kvUsage,
    kvCapacityTokens: fields.kvCapacityTokens === undefined ? 10_000 : fields.kvCapacityTokens,
    running: fields.running ?? 0,
    waiting: fields.waiting ?? 0,
  };
}

/** Candidates `b0 … b{count−1}`, idle, holding nothing. */
export function someCandidates(count: number): Candidate[] {
  return Array.from({ length: count }, (_value, index) => aCandidate(`b${index}`));
}

/** A request of `blocks` full blocks of `blockSizeBytes` (default 64), text exactly that long. */
export function aRequest(fields: Partial<RoutingRequest> & { blocks?: number } = {}): RoutingRequest {
  const blockSizeBytes = fields.blockSizeBytes ?? 64;
  const blocks = fields.blocks ?? 16;
  return {
    model: fields.model ?? 'test-model',
    blockHashes: fields.blockHashes ?? Array.from({ length: blocks }, (_value, index) => 1000 + index),
    blockSizeBytes,
    textBytes: fields.textBytes ?? blocks * blockSizeBytes,
    contextBlocks: fields.contextBlocks ?? 0,
    headHash: fields.headHash ?? 12345,
    sessionKey: fields.sessionKey ?? null,
    maxTokens: fields.maxTokens ?? null,
  };
}

export function aContext(seed = 1): PolicyContext {
  return { nowMs: 0, random: seededRandom(seed) };
}

/** A context whose random() returns the given values in turn (then repeats the last one). */
export function scriptedContext(values: readonly number[]): PolicyContext {
  let next = 0;
  return { nowMs: 0, random: () => values[Math.min(next++, values.length - 1)] ?? 0 };
}
