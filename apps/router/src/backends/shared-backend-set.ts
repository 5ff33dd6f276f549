import type { FastifyBaseLogger } from 'fastify';
import type {
  BackendEntry,
  BackendEntrySpec,
  BackendSetChange,
  BackendSetList,
  BackendSetWatch,
  RedisBackendSet,
  RedisClient,
} from '@kvroute/redis-store';
import type { BackendChangeOutcome, BackendChanges } from './backend-changes';
import { backendIdOf, type BackendRegistry, type BackendSpec } from './backend-registry';
import type { BackendRole } from './backend-role';

export interface SharedBackendSetOptions {
  readonly set: RedisBackendSet;
  /** A connection of its own for the change notices (subscriber mode), e.g. `createRedis(url, 'worker')`; closed by the caller. */
  readonly subscriber: RedisClient;
  readonly registry: BackendRegistry;
  /** How often the set's version is read, in case a change notice was lost. */
  readonly pollIntervalMs: number;
  readonly nowMs: () => number;
  readonly logger?: FastifyBaseLogger | undefined;
  /**
   * Whether this replica may route to a URL that came through the shared set (its backend address
   * policy: another replica with a looser allowlist, or anyone who can write to Redis, may have put it
   * there). Absent: every URL may. Configured backends were checked at start and are not asked again.
   */
  readonly admitUrl?: (url: string) => Promise<UrlVerdict>;
  /** URLs of this replica's configured backends. */
  readonly configuredUrls?: ReadonlySet<string>;
  /**
   * The prefill/decode role each configured backend's URL has in this replica's config. Seeding never overwrites,
   * so a role configured for a backend the fleet's set already holds does not apply: said in a warning.
   */
  readonly configuredRoles?: ReadonlyMap<string, BackendRole>;
}

/** An address policy's answer (admin/backend-address-policy.ts); `unresolved`: the name does not resolve yet. */
type UrlVerdict =
  | { readonly allowed: true }
  | { readonly allowed: false; readonly reason: string; readonly unresolved?: true };

/** While Redis stays unreachable, one log line per this interval, not one per poll. */
const UNAVAILABLE_LOG_INTERVAL_MS = 30_000;

/**
 * The backend set of a replica that shares Redis with others: the fleet's set in Redis is the truth,
 * and this replica's registry follows it (pub/sub notices, plus a version poll every `pollIntervalMs`
 * for notices lost while a connection was down). At start the configured backends are seeded into it
 * (HSETNX semantics: what the fleet already has wins, and a backend removed through the admin API stays
 * removed); if Redis later loses its data, the set this replica last applied is seeded again. Admin changes are
 * written to Redis, then read back at once so this replica routes by them
 * before answering; the other replicas apply them when their notice or poll arrives.
 *
 * Redis being away never touches request handling: reads fail, the registry keeps the last set it
 * applied (the configured one if Redis was never reached), and admin changes are refused.
 */
export class SharedBackendSet implements BackendChanges {
  readonly source = 'shared';
  private watch: BackendSetWatch | null = null;
  private lastUnavailableLogMs = -Infinity;
  /** The set being applied (address checks take a DNS lookup): a read-back waits for it. */
  private applying: Promise<void> = Promise.resolve();
  /** Counts the sets read: only the newest one is applied once its checks are done. */
  private readSeq = 0;
  /** `<id> <role>` of the configured roles the set disagrees with, each warned about once. */
  private readonly roleWarnings = new Set<string>();

  constructor(private readonly options: SharedBackendSetOptions) {}

  /** The version of the set the registry holds (0: still the configured one). */
  get version(): number {
    return this.watch?.version ?? 0;
  }

  /** Seeds, follows, and resolves after the first read (which fails fast if Redis is away: polling goes on). */
  async start(): Promise<void> {
    this.watch = this.options.set.watch({
      subscriber: this.options.subscriber,
      pollIntervalMs: this.options.pollIntervalMs,
      seed: () => this.routedSet(),
      onChange: (list) => {
        // Never a rejection left unawaited: a set that cannot be applied is logged, the last one stays.
        this.applying = this.apply(list).catch((error: unknown) =>
          this.options.logger?.error(
            { err: error },
            'shared backend set: could not apply it, routing on the last set applied',
          ),
        );
      },
      onError: (error) => this.reportUnavailable(error),
    });
    await this.watch.refresh();
    await this.applying;
  }

  async stop(): Promise<void> {
    await this.watch?.stop();
    this.watch = null;
  }

  async add(spec: BackendSpec): Promise<BackendChangeOutcome> {
    const change = await this.options.set.add({
      id: backendIdOf(spec),
      url: spec.url,
      models: spec.models,
      weight: spec.weight,
      dataParallel: spec.dataParallel,
      kvEvents: spec.kvEvents,
      role: spec.role,
      bootstrapPort: spec.bootstrapPort,
    });
    return change.existed ? 'exists' : this.applied(change);
  }

  async remove(id: string): Promise<BackendChangeOutcome> {
    const change = await this.options.set.remove(id);
    return change.existed ? this.applied(change) : 'unknown';
  }

  async setDrained(id: string, drained: boolean): Promise<BackendChangeOutcome> {
    const change = await this.options.set.setDrained(id, drained);
    return change.existed ? this.applied(change) : 'unknown';
  }

  /**
   * What this replica routes by, as seed entries: its config until it first reads the shared set, then
   * the last set it applied. Seeding never overwrites, so this only fills a set that lacks entries: at
   * start, and after Redis lost its data (run-time changes every replica knows then survive it).
   */
  private routedSet(): BackendEntrySpec[] {
    const registry = this.options.registry;
    const entries = new Map<string, BackendEntrySpec>();
    // One entry per engine: a data-parallel backend's ranks are one entry (its first rank speaks for it).
    for (const backend of registry.backends) {
      if (entries.has(backend.engineId)) continue;
      entries.set(backend.engineId, {
        id: backend.engineId,
        url: backend.url,
        models: backend.configuredModels ?? undefined,
        weight: backend.info.weight,
        drained: registry.isDrained(backend.id),
        dataParallel: backend.dataParallel ?? undefined,
        kvEvents: backend.kvEvents ?? undefined,
        role: backend.role,
        bootstrapPort: backend.bootstrapPort ?? undefined,
      });
    }
    return [...entries.values()];
  }

  private warnRoleDifferences(entries: readonly BackendEntry[]): void {
    for (const entry of entries) {
      const configured = this.options.configuredRoles?.get(entry.url);
      const shared = entry.role ?? 'both';
      if (configured === undefined || configured === shared) continue;
      const key = `${entry.id} ${configured}`;
      if (this.roleWarnings.has(key)) continue;
      this.roleWarnings.add(key);
      this.options.logger?.warn(
        { backend: entry.id, configuredRole: configured, sharedRole: shared },
        "shared backend set: this backend's configured role is not the fleet's (the set is seeded, never " +
          'overwritten): remove it and add it again through the admin API to change it',
      );
    }
  }

  /** The change is in Redis: read it back so this replica routes by it before the caller hears "done". */
  private async applied(change: BackendSetChange): Promise<BackendChangeOutcome> {
    if (change.changed > 0) {
      await this.watch?.refresh();
      await this.applying;
    }
    return 'done';
  }

  private async apply(list: BackendSetList): Promise<void> {
    const seq = ++this.readSeq;
    const logger = this.options.logger;
    if (list.unreadable.length > 0)
      logger?.warn({ backends: list.unreadable }, 'shared backend set: ignoring entries that cannot be read');
    const entries = await this.admitted(list.backends);
    // A newer set was read while these checks ran: it is applied instead.
    if (seq !== this.readSeq) return;
    this.options.registry.replaceAll(
      entries.map((entry) => ({
        spec: {
          id: entry.id,
          url: entry.url,
          models: entry.models,
          weight: entry.weight,
          dataParallel: entry.dataParallel,
          kvEvents: entry.kvEvents,
          role: entry.role,
          bootstrapPort: entry.bootstrapPort,
        },
        drained: entry.drained,
      })),
    );
    this.warnRoleDifferences(entries);
    const drained = entries.filter((entry) => entry.drained).map((entry) => entry.id);
    logger?.info(
      { version: list.version, backends: entries.map((entry) => entry.id), drained },
      'shared backend set applied',
    );
    if (drained.length === entries.length)
      logger?.warn('shared backend set has no undrained backend: nothing to route to');
  }

  /** The entries this replica may route to: the configured ones, and the others its address policy allows. */
  private async admitted(entries: BackendSetList['backends']): Promise<BackendSetList['backends']> {
    const { admitUrl, configuredUrls, logger } = this.options;
    if (admitUrl === undefined) return entries;
    const verdicts = await Promise.all(
      entries.map(async (entry) =>
        configuredUrls?.has(entry.url) === true
          ? ({ allowed: true } as UrlVerdict)
          : admitUrl(entry.url).catch((error: unknown): UrlVerdict => ({ allowed: false, reason: String(error) })),
      ),
    );
    return entries.filter((entry, index) => {
      const verdict = verdicts[index] as UrlVerdict;
      if (verdict.allowed) return true;
      // As at start: a name that does not resolve yet is not refused for it (it cannot be connected to either).
      if (verdict.unresolved === true) {
        logger?.warn(
          { backend: entry.id, reason: verdict.reason },
          'shared backend set: backend address not checked, it does not resolve yet',
        );
        return true;
      }
      logger?.warn(
        { backend: entry.id, reason: verdict.reason },
        "shared backend set: not routing to a backend this replica's address policy refuses (backendAllowlist)",
      );
      return false;
    });
  }

  private reportUnavailable(error: unknown): void {
    const now = this.options.nowMs();
    if (now - this.lastUnavailableLogMs < UNAVAILABLE_LOG_INTERVAL_MS) return;
    this.lastUnavailableLogMs = now;
    this.options.logger?.warn(
      { err: error, backends: this.options.registry.backends.length },
      'shared backend set unreachable: routing on the last set applied',
    );
  }
}
