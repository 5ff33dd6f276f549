/**
 * One-shot timers, passed to the modules that wait (discovery retries, upstream deadlines) so that a
 * test can step or observe them instead of sleeping. `set` returns a handle only `clear` reads.
 */
export interface OneShotTimers {
  set(run: () => void, delayMs: number): unknown;
  clear(handle: unknown): void;
}

/** Node's timers, unref'd: a pending retry or deadline alone never keeps the process alive. */
export const NODE_TIMERS: OneShotTimers = {
  set: (run, delayMs) => setTimeout(run, delayMs).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};
