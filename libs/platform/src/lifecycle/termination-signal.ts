/**
 * Graceful stop on SIGINT/SIGTERM, forced stop on the second signal.
 *
 * Installing a listener for a signal replaces Node's default (exit at once), so a process whose graceful shutdown
 * hangs could only be killed with SIGKILL. The second signal restores the escape hatch: Ctrl-C twice always exits.
 *
 * - first signal: `handler(signal)` runs, exactly once across all watched signals;
 * - if the handler throws or rejects, `onError` sees the error and the process exits with code 1 (shutdown failed,
 *   and nothing else would exit it);
 * - any later signal: `exit(1)` immediately;
 * - the returned function removes the listeners (tests, or a caller that takes over signal handling).
 */

export type TerminationHandler = (signal: NodeJS.Signals) => Promise<void> | void;

/** The part of `process` this needs; tests pass an EventEmitter with an `exit` spy. */
export interface TerminationProcess {
  on(event: NodeJS.Signals, listener: (signal: NodeJS.Signals) => void): unknown;
  off(event: NodeJS.Signals, listener: (signal: NodeJS.Signals) => void): unknown;
  exit(code?: number): void;
}

export interface TerminationSignalOptions {
  signals?: readonly NodeJS.Signals[];
  processLike?: TerminationProcess;
  /** Told about a handler that threw or rejected, before `exit(1)`; e.g. `(err) => logger.fatal({ err }, '…')`. */
  onError?: (error: unknown) => void;
}

export function onTerminationSignal(handler: TerminationHandler, options: TerminationSignalOptions = {}): () => void {
  const signals = options.signals ?? ['SIGINT', 'SIGTERM'];
  const target: TerminationProcess = options.processLike ?? process;
  let received = false;

  const listener = (signal: NodeJS.Signals): void => {
    if (received) {
      target.exit(1);
      return;
    }
    received = true;
    const fail = (error: unknown): void => {
      options.onError?.(error);
      target.exit(1);
    };
    // Called synchronously so shutdown starts within the signal's tick; a sync throw and a rejection end the same way.
    try {
      const pending = handler(signal);
      if (pending !== undefined) pending.catch(fail);
    } catch (error) {
      fail(error);
    }
  };

  for (const signal of signals) target.on(signal, listener);
  return () => {
    for (const signal of signals) target.off(signal, listener);
  };
}
