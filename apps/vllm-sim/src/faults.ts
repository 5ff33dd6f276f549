import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { EngineError } from './engine-errors';

/**
 * Fault injection, switchable at run time through `/sim/faults` (off the OpenAI paths), so the router's
 * retries, breakers and health handling can be tested against a misbehaving backend.
 */
export const FaultSettings = z.strictObject({
  /** Extra delay before a generation request is handled, in milliseconds of wall time. */
  extraLatencyMs: z.number().min(0).default(0),
  /** Fraction (0–1) of generation requests answered with `errorStatus` instead of being served. */
  errorRate: z.number().min(0).max(1).default(0),
  errorStatus: z.number().int().min(400).max(599).default(503),
  /** Fraction (0–1) of generation requests that never get an answer (until the client gives up). */
  hangRate: z.number().min(0).max(1).default(0),
  /** Fraction (0–1) of streams cut off (socket destroyed) after the first token. */
  dropStreamRate: z.number().min(0).max(1).default(0),
  /** `/health` answers 503 (engine dead, or llama.cpp "Loading model"). */
  unhealthy: z.boolean().default(false),
});
export type FaultSettings = z.infer<typeof FaultSettings>;

export const NO_FAULTS: FaultSettings = FaultSettings.parse({});

/** Stops accepting connections for a while (connection refused), then listens again. */
export interface ConnectionGate {
  refuseFor(durationMs: number): Promise<void>;
}

export class FaultInjector {
  private settings: FaultSettings = NO_FAULTS;

  constructor(private readonly random: () => number) {}

  get current(): FaultSettings {
    return this.settings;
  }

  update(patch: Partial<FaultSettings>): FaultSettings {
    this.settings = FaultSettings.parse({ ...this.settings, ...patch });
    return this.settings;
  }

  clear(): void {
    this.settings = NO_FAULTS;
  }

  /** What to do with the next generation request. */
  draw(): 'serve' | 'error' | 'hang' {
    const { errorRate, hangRate } = this.settings;
    if (errorRate > 0 && this.random() < errorRate) return 'error';
    if (hangRate > 0 && this.random() < hangRate) return 'hang';
    return 'serve';
  }

  /**
   * The faults every generation endpoint (chat, completions, Messages, Responses) applies before it
   * serves: the extra latency, then the draw. Throws the injected error (answered by the app's error
   * handler); resolves `hang` (take the request, never answer) or `serve`.
   */
  async beforeServing(): Promise<'serve' | 'hang'> {
    if (this.settings.extraLatencyMs > 0) await delay(this.settings.extraLatencyMs);
    const action = this.draw();
    if (action === 'error') {
      const status = this.settings.errorStatus;
      throw new EngineError(
        status === 503 ? 'unavailable' : status >= 500 ? 'internal' : 'bad-request',
        'Injected fault (vllm-sim).',
        status,
      );
    }
    return action;
  }

  shouldDropStream(): boolean {
    return this.settings.dropStreamRate > 0 && this.random() < this.settings.dropStreamRate;
  }
}
