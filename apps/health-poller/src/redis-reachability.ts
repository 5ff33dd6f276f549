import type { FastifyBaseLogger } from 'fastify';

/**
 * Error codes that say Redis (or the way to it) is not there: what an outage is made of, expected, and
 * retried by every client on its own. Anything else is a fault worth its stack trace.
 */
const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
]);

/** ioredis's own words for a connection that is gone (no code on these). */
const CONNECTION_ERROR_MESSAGES =
  /^(Connection is closed|Stream isn't writeable|Failed to refresh slots cache|None of startup nodes is available)/;

/** Whether `error` only says that Redis cannot be reached now (see CONNECTION_ERROR_CODES). */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== undefined && CONNECTION_ERROR_CODES.has(code)) return true;
  return CONNECTION_ERROR_MESSAGES.test(error.message);
}

/** What a client that stands for Redis's reachability emits (ioredis's Redis and Cluster both do). */
export interface ReachabilitySource {
  on(event: 'ready', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

/**
 * Redis's reachability as the poller logs it: one warning when it goes (no stack: the code and message
 * say it all), one info line when it is back, whatever the number of connections and retries in
 * between. Every client of the poller (its four connections, BullMQ's queue and worker and their
 * duplicates) meets the same outage and retries on its own, several times a second each: logged one
 * by one, that was ~30 stack traces before start gave up. The state follows one connection (`watch`),
 * the poller's main one; the others' connection errors go to debug (`failed`), while their other
 * errors stay warnings.
 */
export class RedisReachability {
  private state: 'unknown' | 'up' | 'down' = 'unknown';
  /** When Redis was last seen coming back (ms, nowMs); -∞: never. */
  private backAtMs = Number.NEGATIVE_INFINITY;

  /**
   * `aftermathMs`: how long after Redis is back its users' other errors still count as the outage's (work
   * in flight across it: a BullMQ job whose lock or keys a restarted Redis lost) and go to debug, as
   * connection errors do.
   */
  constructor(
    private readonly logger: FastifyBaseLogger | undefined,
    private readonly nowMs: () => number = Date.now,
    private readonly aftermathMs = 10_000,
  ) {}

  /** Whether Redis is down now, or came back less than the aftermath ago (what fails then is the outage's doing). */
  get inOutage(): boolean {
    return this.state === 'down' || this.nowMs() - this.backAtMs < this.aftermathMs;
  }

  /** Redis is down while `source` cannot connect, up again once it is ready. */
  watch(source: ReachabilitySource): void {
    source.on('ready', () => this.reached());
    source.on('error', (error) => this.unreachable(error));
  }

  /** Whether Redis is known to be down now. */
  get down(): boolean {
    return this.state === 'down';
  }

  /**
   * An error of one of the poller's Redis users (`what`: the message to log it under): a connection
   * error, or any error during an outage and its aftermath (`inOutage`), is the outage `watch` reports,
   * logged at debug here; any other error is a warning with its stack.
   */
  failed(error: unknown, what: string, fields: Readonly<Record<string, unknown>> = {}): void {
    if (isConnectionError(error) || this.inOutage) this.logger?.debug({ ...fields, reason: reasonOf(error) }, what);
    else this.logger?.warn({ ...fields, err: error }, what);
  }

  private unreachable(error: Error): void {
    if (!isConnectionError(error)) {
      this.logger?.warn({ err: error }, 'Redis connection error');
      return;
    }
    if (this.state === 'down') {
      this.logger?.debug({ reason: reasonOf(error) }, 'Redis still unreachable');
      return;
    }
    this.state = 'down';
    this.logger?.warn(
      { redis: 'down', reason: reasonOf(error) },
      'Redis unreachable: scrapes wait, and states are published again once it is back (every connection retries on its own)',
    );
  }

  private reached(): void {
    if (this.state === 'down') {
      this.logger?.info({ redis: 'up' }, 'Redis reachable again: scraping and publishing');
      this.backAtMs = this.nowMs();
    }
    this.state = 'up';
  }
}

/** `ECONNREFUSED: connect ECONNREFUSED 10.0.0.5:6379`: enough to act on, without the stack. */
function reasonOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as NodeJS.ErrnoException).code;
  return code === undefined ? error.message : `${code}: ${error.message}`;
}
