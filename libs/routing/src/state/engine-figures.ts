import type { EngineFigures, EngineLoad } from '../types';

/**
 * An engine's own load as the two integers the atomic rules read (the cost rule's waiting and KV
 * terms), whoever evaluates them: the policy in TypeScript on a snapshot, or a state store next to its
 * state (the Redis store keeps these figures in the pool's slot, so a decision does not ship them).
 */

/** Usage at or above which an engine that reports no KV capacity counts as full. */
const KV_FULL_USAGE = 0.98;

/**
 * The engine's free KV in tokens as it reports it, an integer: -1 = no limit known (no fresh engine
 * state, no usage reported, or no capacity reported and usage below KV_FULL_USAGE), 0 = full.
 */
export function engineReportedFreeTokens(engine: EngineLoad | null | undefined): number {
  if (engine === undefined || engine === null || engine.kvUsage === null) return -1;
  if (engine.kvCapacityTokens === null) return engine.kvUsage >= KV_FULL_USAGE ? 0 : -1;
  return Math.max(0, Math.floor(engine.kvCapacityTokens * (1 - Math.min(1, Math.max(0, engine.kvUsage)))));
}

/** Requests waiting in the engine's own queue, a whole number (a scraped gauge may read 3.0); 0 when unknown. */
export function engineWaiting(engine: EngineLoad | null | undefined): number {
  return Math.max(0, Math.round(engine?.waiting ?? 0));
}

/** An engine's load as the two integers a state store keeps for the rules (route.lua reads them per candidate). */
export function engineFigures(engine: EngineLoad | null | undefined): EngineFigures {
  return { waiting: engineWaiting(engine), freeTokens: engineReportedFreeTokens(engine) };
}

/**
 * A load whose figures are `figures` (engineFigures of it gives them back exactly), for evaluating a rule
 * on what a state store read: the store keeps the figures, not the load they came from. Unknown (0 waiting,
 * no limit) is null, as engineFigures reads null.
 */
export function engineLoadReadingAs(figures: EngineFigures): EngineLoad | null {
  if (figures.waiting === 0 && figures.freeTokens < 0) return null;
  return figures.freeTokens < 0
    ? { kvUsage: null, kvCapacityTokens: null, running: 0, waiting: figures.waiting }
    : { kvUsage: 0, kvCapacityTokens: figures.freeTokens, running: 0, waiting: figures.waiting };
}
