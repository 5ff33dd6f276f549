/**
 * Closes what a process opened, last opened first, under one deadline (house rule 11). main.ts pushes a closer right
 * after creating each resource, so reverse order is dependency order: the HTTP server stops taking requests before
 * the Redis client it uses goes away, and BullMQ workers finish before their connection closes.
 *
 * Invariants:
 * - closers run one at a time, each awaited, in reverse order of `push`;
 * - a closer that throws or rejects is logged and recorded, and the next one still runs;
 * - when the deadline passes, `closeAll` resolves at once: the closer still running is reported as timed out and the
 *   ones not yet started as skipped (starting them out of order could close a dependency under a running user);
 * - `closeAll` runs once; later calls return the same promise.
 */

export type Closer = () => Promise<void> | void;

/** The part of a pino logger the stack uses; structural so tests can pass a fake. */
export interface ShutdownLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

export interface CloseAllOptions {
  /** Budget for all closers together, in milliseconds, counted from the `closeAll` call. */
  deadlineMs: number;
  logger?: ShutdownLogger;
}

export interface ShutdownResult {
  /** True when every closer finished without error before the deadline. */
  ok: boolean;
  /** Closers that finished cleanly, in the order they ran. */
  closed: string[];
  failed: { name: string; error: unknown }[];
  /** The closer still running when the deadline passed (at most one, since closers run in sequence). */
  timedOut: string[];
  /** Closers never started because the deadline had passed. */
  skipped: string[];
  elapsedMs: number;
}

interface Entry {
  name: string;
  close: Closer;
}

type CloserOutcome = { kind: 'closed' } | { kind: 'failed'; error: unknown };

export class ShutdownStack {
  private readonly entries: Entry[] = [];
  private closing: Promise<ShutdownResult> | undefined;

  /** Registers a closer. Pushing after `closeAll` began is a wiring bug (the resource would leak), so it throws. */
  push(name: string, close: Closer): void {
    if (this.closing !== undefined) throw new Error(`ShutdownStack: cannot push "${name}" after closeAll() started`);
    this.entries.push({ name, close });
  }

  /** Names in the order they will close. */
  get names(): string[] {
    return this.entries.map((entry) => entry.name).reverse();
  }

  /** Runs every closer once. Options of a second call are ignored: it returns the first call's promise. */
  closeAll(options: CloseAllOptions): Promise<ShutdownResult> {
    this.closing ??= this.run(options);
    return this.closing;
  }

  private async run({ deadlineMs, logger }: CloseAllOptions): Promise<ShutdownResult> {
    const startedAt = performance.now();
    const result: ShutdownResult = { ok: true, closed: [], failed: [], timedOut: [], skipped: [], elapsedMs: 0 };

    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<'deadline'>((resolve) => {
      timer = setTimeout(() => resolve('deadline'), deadlineMs);
    });

    try {
      const queue = [...this.entries].reverse();
      for (const [index, entry] of queue.entries()) {
        const closerStartedAt = performance.now();
        const outcome = await Promise.race([runCloser(entry.close), deadline]);
        const durationMs = Math.round(performance.now() - closerStartedAt);

        if (outcome === 'deadline') {
          result.timedOut.push(entry.name);
          result.skipped.push(...queue.slice(index + 1).map((skipped) => skipped.name));
          logger?.warn(
            { closer: entry.name, deadlineMs, skipped: result.skipped },
            'shutdown deadline passed; abandoning remaining closers',
          );
          break;
        }
        if (outcome.kind === 'failed') {
          result.failed.push({ name: entry.name, error: outcome.error });
          logger?.error({ closer: entry.name, durationMs, err: outcome.error }, 'closer failed');
        } else {
          result.closed.push(entry.name);
          logger?.info({ closer: entry.name, durationMs }, 'closed');
        }
      }
    } finally {
      clearTimeout(timer);
    }

    result.ok = result.failed.length === 0 && result.timedOut.length === 0;
    result.elapsedMs = Math.round(performance.now() - startedAt);
    return result;
  }
}

/** Never rejects: a synchronous throw or a rejection becomes a `failed` outcome, so a late failure is not unhandled. */
async function runCloser(close: Closer): Promise<CloserOutcome> {
  try {
    await close();
    return { kind: 'closed' };
  } catch (error) {
    return { kind: 'failed', error };
  }
}
