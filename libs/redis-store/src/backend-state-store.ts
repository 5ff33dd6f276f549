import { BackendState, type BackendObservation } from '@kvroute/protocols';
import { backendStateKeys, DEFAULT_KEY_NAMESPACE, type BackendStateKeys } from './keys';
import { RedisStoreError } from './redis-store-error';
import { runScript, SCRIPTS, type RedisClient } from './scripts';

/**
 * The backends' published state in Redis: the health poller records each scrape, routers read the
 * states or follow their changes.
 *
 * Storage (keys in `keys.ts`, `backendStateKeys`): one small HASH per backend (health counters, last
 * observation, the published state JSON, the poller's carry-over between scrapes), PEXPIREd at every
 * scrape so a backend nobody scrapes any more loses its state by itself; a ZSET index of the backends
 * with a state (read without SCAN); a pub/sub channel that gets a backend's new state JSON whenever
 * its health or observation changed, or its engine was found restarted (`restartedAtMs`: the hash keeps
 * the newest restart time, and every state carries it until the hash expires). Each scrape is one script (`src/lua/record-backend-scrape.lua`): the
 * hysteresis, the write, the expiry and the announcement happen together, so poller replicas that take
 * turns scraping one backend share one set of counters and a replica dying loses nothing.
 */

export interface RedisBackendStateStoreOptions {
  /** A connection for reads and writes (the poller: a `worker` connection; a router: `request-path`). */
  readonly redis: RedisClient;
  /** Key namespace (default `kvr:v1`); tests give each run its own. */
  readonly keyNamespace?: string;
}

export interface HealthHysteresis {
  /** Consecutive failed health probes that turn a healthy backend unhealthy (≥ 1). */
  readonly failuresToUnhealthy: number;
  /** Consecutive passed health probes that turn an unhealthy backend healthy again (≥ 1). */
  readonly successesToHealthy: number;
}

export interface ScrapeRecord {
  readonly backendId: string;
  /** Whether the health probe passed (the hysteresis input). */
  readonly healthPassed: boolean;
  readonly observation: BackendObservation;
  /** ms since the Unix epoch when the scrape finished. */
  readonly scrapedAtMs: number;
  /** Text the next scrape of this backend gets back from `readCarry`; null keeps the stored one. */
  readonly carry: string | null;
  /**
   * This scrape found the engine restarted (`detectEngineRestart` of @kvroute/engine-metrics): ms since
   * the Unix epoch to record as the backend's `restartedAtMs` (the scrape's time). Kept only if newer
   * than the one recorded. Absent or null: no restart seen.
   */
  readonly restartedAtMs?: number | null;
}

export interface RecordScrapeOptions extends HealthHysteresis {
  /** How long the state lives without another scrape, ms (a few poll intervals). */
  readonly ttlMs: number;
}

export interface RecordedScrape {
  readonly state: BackendState;
  /** Whether the change was published (health or observation differed from the stored state). */
  readonly published: boolean;
}

export interface SubscribeBackendStatesOptions {
  /** A connection of its own (subscriber mode), e.g. `createRedis(url, 'worker')`; the caller closes it. */
  readonly subscriber: RedisClient;
  readonly onState: (state: BackendState) => void;
  /** A message that is not a valid state, or the subscription failed. */
  readonly onError?: (error: unknown) => void;
}

export interface BackendStateSubscription {
  /** Resolves once Redis confirmed the subscription (true) or it failed (false, `onError` told why). */
  readonly ready: Promise<boolean>;
  /** Stops listening. Leaves the subscriber connection to its owner. */
  stop(): Promise<void>;
}

export class RedisBackendStateStore {
  readonly keys: BackendStateKeys;

  constructor(private readonly options: RedisBackendStateStoreOptions) {
    this.keys = backendStateKeys(options.keyNamespace ?? DEFAULT_KEY_NAMESPACE);
  }

  /** The carry-over the previous scrape of this backend left (null: none, or its state expired). */
  async readCarry(backendId: string): Promise<string | null> {
    return this.options.redis.hget(this.keys.state(requireId(backendId)), 'carry');
  }

  /** Records one scrape: hysteresis, the new state, its TTL, and a PUBLISH if anything changed (atomic). */
  async record(scrape: ScrapeRecord, options: RecordScrapeOptions): Promise<RecordedScrape> {
    const id = requireId(scrape.backendId);
    requireCount('failuresToUnhealthy', options.failuresToUnhealthy);
    requireCount('successesToHealthy', options.successesToHealthy);
    requireCount('ttlMs', options.ttlMs);
    requireTimestamp('scrapedAtMs', scrape.scrapedAtMs);
    const restartedAtMs = scrape.restartedAtMs ?? null;
    if (restartedAtMs !== null) requireTimestamp('restartedAtMs', restartedAtMs);
    const reply = await runScript(
      this.options.redis,
      SCRIPTS.recordBackendScrape,
      [this.keys.state(id), this.keys.index],
      [
        id,
        scrape.scrapedAtMs,
        scrape.healthPassed ? '1' : '0',
        options.failuresToUnhealthy,
        options.successesToHealthy,
        options.ttlMs,
        this.keys.changes,
        JSON.stringify(observationOf(scrape.observation)),
        scrape.carry ?? '',
        restartedAtMs ?? '',
      ],
    );
    if (
      !Array.isArray(reply) ||
      reply.length !== 2 ||
      typeof reply[0] !== 'string' ||
      (reply[1] !== 0 && reply[1] !== 1)
    ) {
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        SCRIPTS.recordBackendScrape.name,
        `${SCRIPTS.recordBackendScrape.name}.lua returned an unexpected reply`,
      );
    }
    const state = decodeState(reply[0]);
    if (state === null)
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        SCRIPTS.recordBackendScrape.name,
        `${SCRIPTS.recordBackendScrape.name}.lua returned a state that does not parse`,
      );
    return { state, published: reply[1] === 1 };
  }

  /** One backend's state; null when it has none (never scraped, or expired) or it cannot be read. */
  async read(backendId: string): Promise<BackendState | null> {
    const raw = await this.options.redis.hget(this.keys.state(requireId(backendId)), 'state');
    return raw === null ? null : decodeState(raw);
  }

  /** Every backend's state that has not expired, sorted by backend id (two round trips, no SCAN). */
  async readAll(): Promise<BackendState[]> {
    const ids = await this.options.redis.zrange(this.keys.index, 0, -1);
    if (ids.length === 0) return [];
    const pipeline = this.options.redis.pipeline();
    for (const id of ids) pipeline.hget(this.keys.state(id), 'state');
    const replies = (await pipeline.exec()) ?? [];
    const states: BackendState[] = [];
    for (const [error, raw] of replies) {
      if (error) throw error;
      const state = typeof raw === 'string' ? decodeState(raw) : null;
      if (state) states.push(state);
    }
    return states.sort((a, b) => (a.backendId < b.backendId ? -1 : a.backendId > b.backendId ? 1 : 0));
  }

  /**
   * Calls `onState` with every state published from now on (at most once each: pub/sub; poll `readAll`
   * for certainty). On a Redis Cluster the subscriber is a Cluster client too (`createRedis` with the
   * cluster URL): classic pub/sub, forwarded to every node, for the reasons in backend-set.ts.
   */
  subscribe(options: SubscribeBackendStatesOptions): BackendStateSubscription {
    const channel = this.keys.changes;
    const onMessage = (from: string, message: string): void => {
      if (from !== channel) return;
      const state = decodeState(message);
      if (state) options.onState(state);
      else
        options.onError?.(
          new RedisStoreError(
            'REDIS_STORE_ERR_BAD_REPLY',
            SCRIPTS.recordBackendScrape.name,
            'a published backend state does not parse',
          ),
        );
    };
    options.subscriber.on('message', onMessage);
    const ready = options.subscriber.subscribe(channel).then(
      () => true,
      (error: unknown) => {
        options.onError?.(error);
        return false;
      },
    );
    return {
      ready,
      async stop() {
        options.subscriber.off('message', onMessage);
        await ready;
        // Not awaited: a waiting (worker) connection would hold it until Redis is back; its owner closes it.
        options.subscriber.unsubscribe(channel).catch(() => undefined);
      },
    };
  }
}

/** The observation's fields in a fixed order, so that equal observations are equal texts (the script compares them). */
function observationOf(observation: BackendObservation): BackendObservation {
  return {
    engine: observation.engine,
    failure: observation.failure,
    kvUsage: observation.kvUsage,
    kvCapacityTokens: observation.kvCapacityTokens,
    running: observation.running,
    waiting: observation.waiting,
    prefixCacheHitRate: observation.prefixCacheHitRate,
    preemptionsTotal: observation.preemptionsTotal,
    engineStartedAtMs: observation.engineStartedAtMs,
    loraAdapters: loraAdaptersOf(observation.loraAdapters),
  };
}

function loraAdaptersOf(lora: BackendObservation['loraAdapters']): BackendObservation['loraAdapters'] {
  return lora === null ? null : { running: lora.running, waiting: lora.waiting, maxLoras: lora.maxLoras };
}

function decodeState(raw: string): BackendState | null {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return null;
  }
  const parsed = BackendState.safeParse(value);
  return parsed.success ? parsed.data : null;
}

function requireId(id: string): string {
  if (typeof id !== 'string' || id.length === 0) throw new RangeError('a backend id must be a non-empty string');
  return id;
}

function requireTimestamp(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0)
    throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
}

function requireCount(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1)
    throw new RangeError(`${name} must be a positive integer, got ${value}`);
}
