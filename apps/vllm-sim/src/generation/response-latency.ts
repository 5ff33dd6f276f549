/**
 * Wall-clock time from a request reaching its route handler to its first token being written, next to
 * the engine's own (simulated) TTFT. The difference is what the simulator process itself adds:
 * event-loop delay, timer granularity, serialisation. The capacity benchmark reads it from /sim/state.
 */
export class ResponseLatency {
  requests = 0;
  /** Σ wall ms from handler entry to first token written. */
  wallTtftMsTotal = 0;
  /** Σ engine TTFT in wall ms (simulated ms ÷ time scale) for the same requests. */
  engineTtftMsTotal = 0;
  /** Σ wall ms from handler entry to the engine accepting the request (validation, templating, tokenizing). */
  admissionMsTotal = 0;

  record(sample: { wallTtftMs: number; engineTtftWallMs: number; admissionMs: number }): void {
    this.requests++;
    this.wallTtftMsTotal += sample.wallTtftMs;
    this.engineTtftMsTotal += sample.engineTtftWallMs;
    this.admissionMsTotal += sample.admissionMs;
  }
}
