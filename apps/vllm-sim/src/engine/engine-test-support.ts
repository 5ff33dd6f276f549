import type { Engine, Sequence, SequenceSpec } from './engine';

/**
 * Test support for the engine tests (imported by `*.test.ts` only): sequences that record what their
 * listener saw, and a driver that runs the engine on its own simulated timeline (no sleeping).
 */

/** Drives the engine step after step until it runs out of work; returns the simulated time then. */
export function runToIdle(engine: Engine, startMs = 0): number {
  let now = startMs;
  for (let guard = 0; guard < 1_000_000; guard++) {
    const plan = engine.planStep(now);
    if (!plan) {
      const readyAt = engine.nextReadyAtMs();
      if (readyAt === null) return now;
      now = Math.max(now, readyAt);
      continue;
    }
    engine.completeStep(plan);
    now = plan.startMs + plan.durationMs;
  }
  throw new Error('engine did not go idle');
}

export interface Trace {
  ttftMs?: number;
  /** Simulated time of the first token. */
  firstTokenAtMs?: number;
  finishedAtMs?: number;
  reason?: string;
  tokens: number;
}

let nextId = 0;

/** A sequence of `outputTokens` tokens that writes what happens to it into `trace`. */
export function traced(promptTokens: number[], outputTokens: number, trace: Trace, salt?: string): SequenceSpec {
  return {
    id: `r${nextId++}`,
    promptTokens,
    outputTokens,
    finishReason: 'length',
    outputTokenAt: (index) => 50_000 + index,
    maxTokensParam: outputTokens,
    ...(salt === undefined ? {} : { cacheSalt: salt }),
    listener: {
      onToken(sequence: Sequence, index, nowMs) {
        trace.tokens++;
        if (index === 0) {
          trace.ttftMs = nowMs - sequence.arrivalMs;
          trace.firstTokenAtMs = nowMs;
        }
      },
      onFinish(_sequence, reason, nowMs) {
        trace.reason = reason;
        trace.finishedAtMs = nowMs;
      },
    },
  };
}

/** Adds one traced request arriving at `arrivalMs`. */
export function addTraced(
  engine: Engine,
  promptTokens: number[],
  arrivalMs: number,
  outputTokens = 1,
): { trace: Trace; sequence: Sequence } {
  const trace: Trace = { tokens: 0 };
  const sequence = engine.add(traced(promptTokens, outputTokens, trace), arrivalMs);
  return { trace, sequence };
}
