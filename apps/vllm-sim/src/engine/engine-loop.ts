import type { Engine, Sequence, SequenceSpec, StepPlan } from './engine';

/** Wall clock and timers, injected so the loop can be driven by a fake clock in tests. */
export interface LoopClock {
  /** Wall time in milliseconds (monotonic). */
  nowMs(): number;
  /** Runs `callback` after `delayMs` wall milliseconds (0 = as soon as possible). Returns a cancel function. */
  schedule(delayMs: number, callback: () => void): () => void;
}

export const realClock: LoopClock = {
  nowMs: () => performance.now(),
  schedule(delayMs, callback) {
    if (delayMs <= 0) {
      const handle = setImmediate(callback);
      return () => clearImmediate(handle);
    }
    const handle = setTimeout(callback, delayMs);
    return () => clearTimeout(handle);
  },
};

/**
 * Runs the engine in real time, `timeScale` simulated milliseconds per wall millisecond.
 *
 * Simulated time is anchored to the wall clock: simNow = (wallNow − wallStart) · timeScale. While the
 * engine is busy, steps run back to back on the simulated timeline (step k+1 starts exactly when
 * step k ends), and each step's results are released when the wall clock reaches its simulated end.
 * A late timer therefore delays what clients see but never shifts the simulated timeline, so timer
 * jitter does not accumulate; if the process cannot keep up (CPU-bound), results come out late, which
 * is exactly the simulator's own overhead that the capacity benchmark measures.
 */
export class EngineLoop {
  private readonly wallStartMs: number;
  private stepInFlight: StepPlan | null = null;
  private lastStepEndMs = 0;
  private cancelTimer: (() => void) | null = null;
  private stopped = false;
  /** True while steps run back to back; false after the engine ran out of schedulable work. */
  private wasBusy = false;
  /**
   * How late step results were released versus their wall-clock deadline: timer granularity plus
   * whatever this process's own CPU load delays. Wall milliseconds.
   */
  readonly lag = { steps: 0, totalMs: 0, maxMs: 0 };

  constructor(
    readonly engine: Engine,
    private readonly clock: LoopClock,
    readonly timeScale: number,
  ) {
    if (!(timeScale > 0)) throw new Error('timeScale must be positive');
    this.wallStartMs = clock.nowMs();
  }

  /** Current simulated time in milliseconds. */
  simNowMs(): number {
    return (this.clock.nowMs() - this.wallStartMs) * this.timeScale;
  }

  submit(spec: SequenceSpec): Sequence {
    const sequence = this.engine.add(spec, this.simNowMs());
    this.wake();
    return sequence;
  }

  abort(sequence: Sequence): void {
    this.engine.abort(sequence, this.simNowMs());
  }

  /** Something outside a step freed KV (a decode side read held blocks): plan again if idle. */
  nudge(): void {
    this.wake();
  }

  /** Stops scheduling steps (shutdown). Sequences in flight get no more tokens. */
  stop(): void {
    this.stopped = true;
    this.cancelTimer?.();
    this.cancelTimer = null;
  }

  private wake(): void {
    if (this.stopped || this.stepInFlight) return;
    this.cancelTimer?.();
    this.cancelTimer = null;
    const simNow = this.simNowMs();
    // Back to back while busy; from "now" after an idle period.
    const startMs = this.wasBusy ? this.lastStepEndMs : Math.max(this.lastStepEndMs, simNow);
    const plan = this.engine.planStep(startMs);
    if (!plan) {
      this.wasBusy = false;
      const readyAt = this.engine.nextReadyAtMs();
      if (readyAt !== null) this.cancelTimer = this.scheduleAtSim(Math.max(readyAt, simNow), () => this.wake());
      return;
    }
    this.wasBusy = true;
    this.stepInFlight = plan;
    this.cancelTimer = this.scheduleAtSim(plan.startMs + plan.durationMs, () => this.finishStep());
  }

  private finishStep(): void {
    const plan = this.stepInFlight as StepPlan;
    this.stepInFlight = null;
    this.cancelTimer = null;
    this.lastStepEndMs = plan.startMs + plan.durationMs;
    const lateMs = Math.max(0, this.clock.nowMs() - this.wallDeadlineMs(this.lastStepEndMs));
    this.lag.steps++;
    this.lag.totalMs += lateMs;
    if (lateMs > this.lag.maxMs) this.lag.maxMs = lateMs;
    this.engine.completeStep(plan);
    this.wake();
  }

  /** Wall time (clock ms) at which simulated time `simMs` is due. */
  private wallDeadlineMs(simMs: number): number {
    return this.wallStartMs + simMs / this.timeScale;
  }

  private scheduleAtSim(simMs: number, callback: () => void): () => void {
    return this.clock.schedule(this.wallDeadlineMs(simMs) - this.clock.nowMs(), callback);
  }
}
