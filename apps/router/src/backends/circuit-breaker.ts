/**
 * Per-backend circuit breaker. Closed: requests flow; `failureThreshold` consecutive failures open it.
 * Open: the backend is skipped for `cooldownMs`. Half-open: exactly one probe request is let through;
 * its success closes the circuit, its failure opens it for another cooldown. Time is injected.
 */
export type BreakerState = 'closed' | 'open' | 'half-open';

export interface CircuitBreakerOptions {
  readonly failureThreshold: number;
  readonly cooldownMs: number;
  readonly nowMs: () => number;
}

export class CircuitBreaker {
  private consecutiveFailures = 0;
  private openedAtMs: number | null = null;
  private probeInFlight = false;

  constructor(private readonly options: CircuitBreakerOptions) {}

  get state(): BreakerState {
    if (this.openedAtMs === null) return 'closed';
    return this.options.nowMs() - this.openedAtMs >= this.options.cooldownMs ? 'half-open' : 'open';
  }

  /** Whether a new request may go to this backend now (without taking the half-open probe slot). */
  isAvailable(): boolean {
    const state = this.state;
    return state === 'closed' || (state === 'half-open' && !this.probeInFlight);
  }

  /** Called when a request is sent: in half-open state it takes the single probe slot. */
  onAttempt(): void {
    if (this.state === 'half-open') this.probeInFlight = true;
  }

  /**
   * The request ended with no verdict on the backend (its client went away first): a half-open probe's
   * slot is free again, so the next request probes; without this the circuit would stay half-open with
   * its one probe slot taken, and the backend would never be tried again.
   */
  onAbandoned(): void {
    this.probeInFlight = false;
  }

  onSuccess(): void {
    this.consecutiveFailures = 0;
    this.openedAtMs = null;
    this.probeInFlight = false;
  }

  onFailure(): void {
    this.consecutiveFailures++;
    const probeFailed = this.probeInFlight;
    this.probeInFlight = false;
    if (probeFailed || this.consecutiveFailures >= this.options.failureThreshold)
      this.openedAtMs = this.options.nowMs();
  }

  /** 0 closed, 1 half-open, 2 open (for the breaker-state gauge). */
  get stateCode(): number {
    const state = this.state;
    return state === 'closed' ? 0 : state === 'half-open' ? 1 : 2;
  }
}
