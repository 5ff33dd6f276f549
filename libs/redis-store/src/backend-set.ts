import { DEFAULT_KEY_NAMESPACE, fleetKeys, type FleetKeys } from './keys';
import { RedisStoreError } from './redis-store-error';
import { integerArrayReply, runScript, SCRIPTS, type RedisClient } from './scripts';

/**
 * The fleet's backend set in Redis: the backends every router replica routes over, so that a backend
 * added, removed or drained through one replica is seen by all of them within a poll interval (500 ms),
 * usually within a few ms through pub/sub.
 *
 * Storage (keys in `keys.ts`, `fleetKeys`): one HASH, backend id → entry JSON, and a version counter.
 * Every change is `change-backend-set.lua`: it writes the entry, bumps the version and PUBLISHes the new
 * version on the changes channel, atomically. Readers (`watch`) follow the set two ways, because pub/sub
 * delivers at most once (a message sent while a subscriber reconnects is lost): a subscription that
 * reacts within milliseconds, and a poll of the version every `pollIntervalMs` that catches up on
 * anything missed. Either way a reader acts only when the version differs from the one it applied.
 *
 * Pub/sub on a Redis Cluster: classic PUBLISH/SUBSCRIBE, not sharded (SPUBLISH/SSUBSCRIBE). A cluster
 * forwards a classic PUBLISH to every node over its bus, the one issued inside a script included, so
 * the subscriber may listen on any node; ioredis's Cluster client keeps one subscriber connection on a
 * node of its choice and, when that node goes, resubscribes on another. The same code and the same
 * channel then serve a single Redis and a cluster. Sharded pub/sub would spare the other shards that
 * forwarding, but the traffic is one message per change to the set or per scrape that changed a
 * backend's state, and it would take ioredis's opt-in `shardedSubscribers` (one more connection per
 * master, whose resubscription after a topology change swallows its failures in ioredis 5.11) and
 * Redis ≥ 7, for messages a poll backs up anyway (readers of the backend states re-read them too):
 * what is lost while a subscriber moves to another node, the poll catches up on.
 */

/** A backend as the fleet shares it. */
export interface BackendEntry {
  readonly id: string;
  /** Base URL of its OpenAI-compatible API. */
  readonly url: string;
  /** Models it serves; absent = each replica reads them from the backend's GET /v1/models. */
  readonly models?: readonly string[];
  /** Relative capacity. */
  readonly weight: number;
  /**
   * Data-parallel engine ranks behind the URL (vLLM --data-parallel-size): routers route to each rank
   * (`<id>@<rank>`, X-data-parallel-rank); absent: one engine.
   */
  readonly dataParallel?: BackendDataParallel;
  /**
   * Where its engine publishes vLLM's KV events (the health poller's indexer follows them): rank 0's PUB
   * and replay endpoints (`tcp://host:port`; replay null = none) and the model pool of its blocks; absent:
   * the poller's defaults (its `kvEventsPort`).
   */
  readonly kvEvents?: BackendKvEvents;
  /** Its prefill/decode role (`prefill`, `decode`); absent: `both`, whole requests or either leg. */
  readonly role?: BackendPdRole;
  /** SGLang prefill engines: the bootstrap server's port; absent: SGLang's default (8998). */
  readonly bootstrapPort?: number;
  /** Drained: no new requests go to it; those already running finish. */
  readonly drained: boolean;
  /** ms (wall clock of the replica that made the change) of the entry's last change. */
  readonly updatedAtMs: number;
}

export type BackendPdRole = 'both' | 'prefill' | 'decode';

/** A backend's data-parallel ranks (apps/router backends/data-parallel.ts has their meaning). */
export interface BackendDataParallel {
  readonly size: number;
  readonly startRank: number;
  readonly hybridLb: boolean;
}

/** A backend's KV-event endpoints as the shared set carries them (BackendEntry.kvEvents). */
export interface BackendKvEvents {
  readonly endpoint?: string;
  readonly replayEndpoint?: string | null;
  readonly model?: string;
}

/** What a new entry needs; it starts undrained unless `drained` says otherwise (a set re-seeded from what a replica last knew). */
export type BackendEntrySpec = Pick<BackendEntry, 'id' | 'url' | 'models' | 'weight'> & {
  readonly drained?: boolean;
  readonly dataParallel?: BackendDataParallel | undefined;
  readonly kvEvents?: BackendKvEvents | undefined;
  readonly role?: BackendPdRole | undefined;
  readonly bootstrapPort?: number | undefined;
};

export interface BackendSetList {
  /** 0 = the set was never written (or Redis lost it). */
  readonly version: number;
  /** Sorted by id, so that every replica lists the same set in the same order. */
  readonly backends: readonly BackendEntry[];
  /** Ids whose entry could not be read (not JSON of the expected shape): left out of `backends`. */
  readonly unreadable: readonly string[];
}

export interface BackendSetChange {
  /** The set's version after the call. */
  readonly version: number;
  /** Entries added, deleted or modified (0: nothing to do, the version did not move). */
  readonly changed: number;
  /** Whether the id was in the set before the call (`add`: taken; `remove`, `setDrained`: false = no such backend). */
  readonly existed: boolean;
}

export interface RedisBackendSetOptions {
  /**
   * A request-path connection (`createRedis(url, 'request-path')`): reads and changes fail fast while
   * Redis is away, and the caller keeps routing on the last set it applied.
   */
  readonly redis: RedisClient;
  /** Wall-clock ms (Date.now-like) stamped on changed entries. */
  readonly nowMs: () => number;
  /** Key namespace (default `kvr:v1`); tests give each run its own. */
  readonly keyNamespace?: string;
}

export interface WatchBackendSetOptions {
  /**
   * A connection of its own (one in subscriber mode can run nothing else), e.g. `createRedis(url,
   * 'worker')`: it waits through outages and resubscribes on reconnect. The caller closes it.
   */
  readonly subscriber: RedisClient;
  /** Called with the set whenever a read finds a version other than the last one applied (never with version 0). */
  readonly onChange: (list: BackendSetList) => void;
  /** How often the version is read, in case a pub/sub message was lost (default 500 ms). */
  readonly pollIntervalMs?: number;
  /**
   * Backends to add if the set lacks them (`seed`), asked for on the first read that reaches Redis and
   * again whenever the set has vanished (Redis restarted without its data), so the fleet never ends up
   * with an empty set because Redis forgot it. A replica answers with the set it routes by: its config
   * at first, later the last set it applied, drained flags included, so losing Redis's data does not
   * undo the run-time changes every replica already knows.
   */
  readonly seed?: () => readonly BackendEntrySpec[];
  /** A read or the subscription failed (Redis away): the last set handed to onChange stays in force. */
  readonly onError?: (error: unknown) => void;
}

export interface BackendSetWatch {
  /** The version of the last set handed to onChange (0 before the first). */
  readonly version: number;
  /**
   * Reads the set now, after any change made before this call (a read already under way is followed by
   * another); true when Redis answered. Call after changing the set to apply it on this replica at once.
   */
  refresh(): Promise<boolean>;
  /** Stops polling and listening. Leaves the subscriber connection to its owner. */
  stop(): Promise<void>;
}

export const DEFAULT_BACKEND_SET_POLL_MS = 500;

export class RedisBackendSet {
  readonly keys: FleetKeys;

  constructor(private readonly options: RedisBackendSetOptions) {
    this.keys = fleetKeys(options.keyNamespace ?? DEFAULT_KEY_NAMESPACE);
  }

  /** Adds each backend the set does not have, unless it was removed through `remove`. Never overwrites an entry. */
  async seed(specs: readonly BackendEntrySpec[]): Promise<BackendSetChange> {
    const now = this.options.nowMs();
    return this.change(
      'seed',
      now,
      specs.flatMap((spec) => [spec.id, encodeEntry(spec, now)]),
    );
  }

  /** Adds a backend (undrained unless the spec says so) unless its id is taken (`existed` true, nothing changed). */
  async add(spec: BackendEntrySpec): Promise<BackendSetChange> {
    const now = this.options.nowMs();
    return this.change('add', now, [spec.id, encodeEntry(spec, now)]);
  }

  /** Removes a backend (`existed` false: there was none with that id). */
  async remove(id: string): Promise<BackendSetChange> {
    return this.change('remove', this.options.nowMs(), [requireId(id)]);
  }

  /** Drains or undrains a backend (`existed` false: no such backend; `changed` 0: it already was). */
  async setDrained(id: string, drained: boolean): Promise<BackendSetChange> {
    return this.change('set-drained', this.options.nowMs(), [requireId(id), drained ? '1' : '0']);
  }

  /** The set's version alone (0 = never written): what a poll reads. */
  async version(): Promise<number> {
    return parseVersion(await this.options.redis.get(this.keys.version));
  }

  /** The whole set and its version, read together (one MULTI: no change can fall between the two). */
  async list(): Promise<BackendSetList> {
    const replies = await this.options.redis.multi().get(this.keys.version).hgetall(this.keys.backends).exec();
    if (!replies || replies.length !== 2)
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        'backend-set',
        'reading the backend set returned no reply',
      );
    const [versionReply, entriesReply] = replies as [[Error | null, unknown], [Error | null, unknown]];
    if (versionReply[0]) throw versionReply[0];
    if (entriesReply[0]) throw entriesReply[0];
    const backends: BackendEntry[] = [];
    const unreadable: string[] = [];
    for (const [id, raw] of Object.entries((entriesReply[1] ?? {}) as Record<string, string>)) {
      const entry = decodeEntry(id, raw);
      if (entry) backends.push(entry);
      else unreadable.push(id);
    }
    backends.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return { version: parseVersion(versionReply[1]), backends, unreadable };
  }

  /** Follows the set: pub/sub for speed, a version poll for certainty (see the file header). */
  watch(options: WatchBackendSetOptions): BackendSetWatch {
    return new BackendSetWatcher(this, options);
  }

  private async change(operation: string, now: number, args: readonly string[]): Promise<BackendSetChange> {
    const reply = await runScript(
      this.options.redis,
      SCRIPTS.changeBackendSet,
      [this.keys.backends, this.keys.version, this.keys.removed],
      [operation, now, this.keys.changes, ...args],
    );
    const [version, changed, existed] = integerArrayReply(SCRIPTS.changeBackendSet, reply, 3) as [
      number,
      number,
      number,
    ];
    return { version, changed, existed: existed === 1 };
  }
}

class BackendSetWatcher implements BackendSetWatch {
  private applied = 0;
  private seeded = false;
  private reading: Promise<boolean> | null = null;
  private readAgain = false;
  private stopped = false;
  private readonly timer: NodeJS.Timeout;
  private readonly onMessage = (channel: string): void => {
    if (channel === this.set.keys.changes) void this.refresh();
  };

  constructor(
    private readonly set: RedisBackendSet,
    private readonly options: WatchBackendSetOptions,
  ) {
    options.subscriber.on('message', this.onMessage);
    options.subscriber.subscribe(this.set.keys.changes).catch((error: unknown) => options.onError?.(error));
    this.timer = setInterval(() => void this.refresh(), options.pollIntervalMs ?? DEFAULT_BACKEND_SET_POLL_MS);
    this.timer.unref();
  }

  get version(): number {
    return this.applied;
  }

  refresh(): Promise<boolean> {
    if (this.stopped) return Promise.resolve(false);
    if (this.reading) {
      // The read under way may have passed its version check already: read once more after it.
      this.readAgain = true;
      return this.reading;
    }
    this.reading = (async () => {
      let answered = true;
      do {
        this.readAgain = false;
        answered = await this.readOnce();
      } while (this.readAgain && !this.stopped);
      return answered;
    })().finally(() => {
      this.reading = null;
    });
    return this.reading;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.options.subscriber.off('message', this.onMessage);
    // Not awaited: a waiting (worker) connection would hold it until Redis is back; its owner closes it.
    this.options.subscriber.unsubscribe(this.set.keys.changes).catch(() => undefined);
    await this.reading;
  }

  private async readOnce(): Promise<boolean> {
    try {
      let version = await this.set.version();
      if (this.options.seed && (!this.seeded || version === 0)) {
        const seed = this.options.seed();
        if (seed.length > 0) version = (await this.set.seed(seed)).version;
        this.seeded = true;
      }
      if (version === 0 || version === this.applied) return true;
      const list = await this.set.list();
      if (list.version === 0 || list.version === this.applied || this.stopped) return true;
      this.options.onChange(list);
      this.applied = list.version;
      return true;
    } catch (error) {
      this.options.onError?.(error);
      return false;
    }
  }
}

function parseVersion(reply: unknown): number {
  if (reply === null || reply === undefined) return 0;
  const version = Number(reply);
  if (!Number.isSafeInteger(version) || version < 0)
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      'backend-set',
      `backend set version is ${JSON.stringify(reply)}`,
    );
  return version;
}

function requireId(id: string): string {
  if (typeof id !== 'string' || id.length === 0) throw new RangeError('a backend id must be a non-empty string');
  return id;
}

/** The entry JSON of a new backend; checks the spec, since every replica will route by it. */
function encodeEntry(spec: BackendEntrySpec, now: number): string {
  requireId(spec.id);
  if (!isHttpUrl(spec.url))
    throw new RangeError(`backend ${spec.id}: url must be http(s), got ${JSON.stringify(spec.url)}`);
  if (!Number.isFinite(spec.weight) || spec.weight <= 0)
    throw new RangeError(`backend ${spec.id}: weight must be a positive number, got ${spec.weight}`);
  if (spec.models !== undefined && !isModelList(spec.models))
    throw new RangeError(`backend ${spec.id}: models must be a non-empty list of non-empty names`);
  if (spec.dataParallel !== undefined && !isDataParallel(spec.dataParallel))
    throw new RangeError(`backend ${spec.id}: dataParallel must be {size ≥ 1, startRank ≥ 0, hybridLb}`);
  if (spec.kvEvents !== undefined && !isKvEvents(spec.kvEvents))
    throw new RangeError(
      `backend ${spec.id}: kvEvents must be {endpoint?, replayEndpoint?, model?} with tcp://host:port endpoints`,
    );
  if (spec.role !== undefined && !isPdRole(spec.role))
    throw new RangeError(`backend ${spec.id}: role must be both, prefill or decode, got ${JSON.stringify(spec.role)}`);
  if (spec.bootstrapPort !== undefined && !isPort(spec.bootstrapPort))
    throw new RangeError(`backend ${spec.id}: bootstrapPort must be a port (1–65535), got ${spec.bootstrapPort}`);
  const entry: BackendEntry = {
    id: spec.id,
    url: spec.url,
    ...(spec.models === undefined ? {} : { models: [...spec.models] }),
    weight: spec.weight,
    ...(spec.dataParallel === undefined ? {} : { dataParallel: { ...spec.dataParallel } }),
    ...(spec.kvEvents === undefined ? {} : { kvEvents: { ...spec.kvEvents } }),
    ...(spec.role === undefined || spec.role === 'both' ? {} : { role: spec.role }),
    ...(spec.bootstrapPort === undefined ? {} : { bootstrapPort: spec.bootstrapPort }),
    drained: spec.drained ?? false,
    updatedAtMs: now,
  };
  return JSON.stringify(entry);
}

/** The entry stored under `id`, or null if it is not what `encodeEntry` (or the script) writes. */
function decodeEntry(id: string, raw: string): BackendEntry | null {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return null;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const entry = value as Record<string, unknown>;
  if (entry.id !== id || !isHttpUrl(entry.url) || typeof entry.weight !== 'number' || !(entry.weight > 0)) return null;
  if (typeof entry.drained !== 'boolean' || typeof entry.updatedAtMs !== 'number') return null;
  if (entry.models !== undefined && !isModelList(entry.models)) return null;
  if (entry.dataParallel !== undefined && !isDataParallel(entry.dataParallel)) return null;
  if (entry.kvEvents !== undefined && !isKvEvents(entry.kvEvents)) return null;
  if (entry.role !== undefined && !isPdRole(entry.role)) return null;
  if (entry.bootstrapPort !== undefined && !isPort(entry.bootstrapPort)) return null;
  return {
    id,
    url: entry.url,
    ...(entry.models === undefined ? {} : { models: entry.models as string[] }),
    weight: entry.weight,
    ...(entry.dataParallel === undefined ? {} : { dataParallel: entry.dataParallel as BackendDataParallel }),
    ...(entry.kvEvents === undefined ? {} : { kvEvents: entry.kvEvents as BackendKvEvents }),
    ...(entry.role === undefined ? {} : { role: entry.role as BackendPdRole }),
    ...(entry.bootstrapPort === undefined ? {} : { bootstrapPort: entry.bootstrapPort as number }),
    drained: entry.drained,
    updatedAtMs: entry.updatedAtMs,
  };
}

function isPdRole(value: unknown): value is BackendPdRole {
  return value === 'both' || value === 'prefill' || value === 'decode';
}

function isPort(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65_535;
}

/** Routable: an absolute http(s) URL (every replica parses it into an upstream origin). */
function isHttpUrl(url: unknown): url is string {
  return typeof url === 'string' && /^https?:\/\//.test(url) && URL.canParse(url);
}

function isModelList(models: unknown): models is readonly string[] {
  return (
    Array.isArray(models) && models.length > 0 && models.every((model) => typeof model === 'string' && model.length > 0)
  );
}

/** A data-parallel setting every replica can route by: integer size ≥ 1 and start rank ≥ 0, a boolean. */
function isDataParallel(value: unknown): value is BackendDataParallel {
  if (value === null || typeof value !== 'object') return false;
  const { size, startRank, hybridLb } = value as Record<string, unknown>;
  return (
    Number.isInteger(size) &&
    (size as number) >= 1 &&
    Number.isInteger(startRank) &&
    (startRank as number) >= 0 &&
    typeof hybridLb === 'boolean'
  );
}

const TCP_ENDPOINT = /^tcp:\/\/[^\s/]+:\d{1,5}$/;

/** KV-event endpoints every poller can connect to: tcp://host:port strings (replay may be null), a model name. */
function isKvEvents(value: unknown): value is BackendKvEvents {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const { endpoint, replayEndpoint, model, ...rest } = value as Record<string, unknown>;
  return (
    Object.keys(rest).length === 0 &&
    (endpoint === undefined || (typeof endpoint === 'string' && TCP_ENDPOINT.test(endpoint))) &&
    (replayEndpoint === undefined ||
      replayEndpoint === null ||
      (typeof replayEndpoint === 'string' && TCP_ENDPOINT.test(replayEndpoint))) &&
    (model === undefined || (typeof model === 'string' && model !== ''))
  );
}
