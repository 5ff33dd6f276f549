import type { FastifyBaseLogger } from 'fastify';
import type { BackendChangeOutcome, BackendChanges } from '../backends/backend-changes';
import type { BackendRegistry } from '../backends/backend-registry';
import type { BackendSource, DiscoveryAnswer } from './backend-source';
import type { DiscoveryLeadership } from './discovery-leader';
import { planDiscoveryChanges, type DiscoveryChange, type OwnedBackend } from './discovery-plan';

/** An address policy's answer, as BackendAddressPolicy.check gives it. */
type BackendsAnswer = Extract<DiscoveryAnswer, { kind: 'backends' }>;

type UrlVerdict = { readonly allowed: true } | { readonly allowed: false; readonly reason: string };

/** A repeating timer, passed in so that a test can observe or step it. */
export interface IntervalTimers {
  every(run: () => void, periodMs: number): unknown;
  cancel(handle: unknown): void;
}

const NODE_INTERVALS: IntervalTimers = {
  every: (run, periodMs) => setInterval(run, periodMs).unref(),
  cancel: (handle) => clearInterval(handle as NodeJS.Timeout),
};

export interface DiscoveryApplierOptions {
  readonly source: BackendSource;
  /** The admin API's path: the fleet's shared set with Redis, this replica's registry without. */
  readonly changes: BackendChanges;
  /** The set as this replica routes by it (it follows the shared set). */
  readonly registry: Pick<BackendRegistry, 'backends' | 'isDrained' | 'findByUrl'>;
  readonly leadership: DiscoveryLeadership;
  /** The backend address policy (backendAllowlist, the SSRF denials), asked before a backend is added, as for an admin add. */
  readonly admitUrl: (url: string) => Promise<UrlVerdict>;
  /** How long a backend missing from the answers stays drained before it is removed, ms. */
  readonly removeAfterMs: number;
  /** How often the last answer is applied again (lease renewal, removals due, a replica taking over), ms. */
  readonly reapplyMs: number;
  /**
   * How long the source may fail before this replica stops re-applying its last answer, ms (about the
   * lease's TTL). Re-applying renews the lease: a leader whose source fails would otherwise keep it
   * forever, holding the fleet on a stale set while replicas whose source answers cannot take over.
   */
  readonly staleAfterMs: number;
  readonly nowMs: () => number;
  /** Where the re-apply interval runs; Node's (unref'd) by default. */
  readonly intervals?: IntervalTimers;
  /** A look at the source failed (`source` = its kind): the metric. */
  readonly onFailure: (source: string) => void;
  /** Whether this replica applies the changes now (took or lost the lease, stopped): the metric. */
  readonly onLeadership?: (leading: boolean) => void;
  readonly logger?: FastifyBaseLogger | undefined;
}

/**
 * Applies a source's answers to the backend set, through the same `BackendChanges` as the admin API.
 * A failed look changes nothing (the last good answer stands); only the lease holder applies (see
 * discovery-leader.ts); answers are applied one at a time, the newest one winning over any waiting.
 */
export class DiscoveryApplier {
  private lastGood: BackendsAnswer | null = null;
  private previous: Map<string, boolean> | null = null;
  private absentSinceMs = new Map<string, number>();
  private leading = false;
  /** Since when the source has failed without a good answer in between (nowMs); null while it answers. */
  private failingSinceMs: number | null = null;
  /** Re-applying stopped because the source has failed too long (logged once per failure run). */
  private stale = false;
  private lastDropped = 0;
  private readonly refused = new Set<string>();
  private queued: BackendsAnswer | null = null;
  private applying: Promise<void> | null = null;
  private timer: unknown = null;
  private stopped = false;

  constructor(private readonly options: DiscoveryApplierOptions) {}

  /** Starts the source and resolves once its first answer is applied (so the router starts with its backends). */
  async start(): Promise<void> {
    await this.options.source.start((answer) => this.onAnswer(answer));
    // stop() may have run while the source was starting: nothing may run after it.
    if (this.stopped) return;
    this.timer = (this.options.intervals ?? NODE_INTERVALS).every(() => this.reapply(), this.options.reapplyMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) (this.options.intervals ?? NODE_INTERVALS).cancel(this.timer);
    this.timer = null;
    await this.options.source.stop();
    await this.applying;
    if (this.leading) await this.options.leadership.release();
    this.setLeading(false);
  }

  private setLeading(leading: boolean): void {
    // Also called with the same value (every apply): the callback sets a gauge, idempotent.
    this.leading = leading;
    this.options.onLeadership?.(leading);
  }

  /** Hands an answer over; resolves once it (or a newer one) has been applied. Never rejects. */
  onAnswer(answer: DiscoveryAnswer): Promise<void> {
    if (answer.kind === 'failed') {
      this.options.onFailure(this.options.source.kind);
      if (this.failingSinceMs === null) {
        this.options.logger?.warn(
          { source: this.options.source.kind, err: answer.error },
          'backend discovery: the source could not be read; keeping the backends of its last answer',
        );
        this.failingSinceMs = this.options.nowMs();
      }
      return this.applying ?? Promise.resolve();
    }
    if (this.failingSinceMs !== null)
      this.options.logger?.info({ source: this.options.source.kind }, 'backend discovery: the source answers again');
    this.failingSinceMs = null;
    this.stale = false;
    this.lastGood = answer;
    return this.enqueue(answer);
  }

  /**
   * The interval's re-apply of the last good answer (lease renewal, removals due, taking over from a
   * leader that left). Not an answer from the source: the failure state stays as it is. Once the source
   * has failed for staleAfterMs, not at all: the lease is not renewed and lapses, so a replica whose
   * source answers takes over instead of the fleet following a stale set for as long as this one runs.
   */
  private reapply(): void {
    if (this.lastGood === null || this.stopped) return;
    if (this.failingSinceMs !== null && this.options.nowMs() - this.failingSinceMs >= this.options.staleAfterMs) {
      if (!this.stale) {
        this.options.logger?.warn(
          { source: this.options.source.kind, failingForMs: this.options.nowMs() - this.failingSinceMs },
          'backend discovery: the source has failed for too long; no longer applying its last answer ' +
            '(the lease lapses, a replica whose source answers takes over)',
        );
      }
      this.stale = true;
      // Whoever holds the lease next changes the set; if this replica takes it back later, it starts from the set as it is then.
      this.setLeading(false);
      this.previous = null;
      this.absentSinceMs = new Map();
      return;
    }
    void this.enqueue(this.lastGood);
  }

  private enqueue(answer: BackendsAnswer): Promise<void> {
    this.queued = answer;
    this.applying ??= this.drainQueue().finally(() => {
      this.applying = null;
    });
    return this.applying;
  }

  private async drainQueue(): Promise<void> {
    while (this.queued !== null && !this.stopped) {
      const answer = this.queued;
      this.queued = null;
      await this.apply(answer).catch((error: unknown) =>
        this.options.logger?.error({ err: error }, 'backend discovery: could not apply an answer'),
      );
    }
  }

  private async apply(answer: BackendsAnswer): Promise<void> {
    const { logger, source } = this.options;
    if (answer.dropped !== this.lastDropped && answer.dropped > 0)
      logger?.warn(
        { dropped: answer.dropped, kept: answer.backends.length },
        'backend discovery: more backends than discoveryMaxBackends, the rest left out',
      );
    this.lastDropped = answer.dropped;
    const holds = await this.options.leadership.holds();
    if (holds !== this.leading)
      logger?.info(
        { source: source.kind, name: source.name },
        holds
          ? 'backend discovery: this replica applies the changes now'
          : 'backend discovery: another replica applies the changes',
      );
    this.setLeading(holds);
    if (!holds) {
      // Whoever takes over starts from the set as it is then.
      this.previous = null;
      this.absentSinceMs = new Map();
      return;
    }
    const plan = planDiscoveryChanges({
      current: this.owned(),
      discovered: answer.backends,
      previous: this.previous,
      absentSinceMs: this.absentSinceMs,
      nowMs: this.options.nowMs(),
      removeAfterMs: this.options.removeAfterMs,
    });
    this.absentSinceMs = plan.absentSinceMs;
    // Refusals are logged once per backend while it is in the answers (bounded by the answer's size).
    const found = new Set(answer.backends.map((backend) => backend.id));
    for (const id of this.refused) if (!found.has(id)) this.refused.delete(id);
    let complete = true;
    for (const change of plan.changes) {
      if (this.stopped) return;
      try {
        await this.run(change);
      } catch (error) {
        complete = false;
        logger?.warn(
          { err: error, change },
          'backend discovery: a change could not be made (the shared set unreachable?); tried again at the next answer',
        );
      }
    }
    if (plan.changes.length > 0)
      logger?.info(
        { changes: plan.changes, backends: answer.backends.length },
        'backend discovery: backend set changed',
      );
    // A change that failed is retried from the state as found (every flag), not from this answer's edges.
    this.previous = complete ? new Map(answer.backends.map((backend) => [backend.id, backend.draining])) : null;
  }

  private async run(change: DiscoveryChange): Promise<void> {
    const { changes } = this.options;
    let outcome: BackendChangeOutcome;
    if (change.op === 'add') {
      const verdict = await this.options.admitUrl(change.url);
      if (!verdict.allowed) {
        if (!this.refused.has(change.id))
          this.options.logger?.warn(
            { backend: change.id, reason: verdict.reason },
            "backend discovery: not adding a backend this replica's address policy refuses (backendAllowlist)",
          );
        this.refused.add(change.id);
        return;
      }
      // The same engine configured or added by an admin under another id: taking it twice would double its share.
      const same = this.options.registry.findByUrl(change.url);
      if (same !== undefined && same.id !== change.id) {
        if (!this.refused.has(change.id))
          this.options.logger?.warn(
            { backend: change.id, existing: same.id },
            'backend discovery: not adding a backend already in the set under another id',
          );
        this.refused.add(change.id);
        return;
      }
      this.refused.delete(change.id);
      outcome = await changes.add({ id: change.id, url: change.url, weight: 1, role: change.role });
      if (change.drained) outcome = await changes.setDrained(change.id, true);
    } else if (change.op === 'remove') {
      outcome = await changes.remove(change.id);
    } else {
      outcome = await changes.setDrained(change.id, change.op === 'drain');
    }
    // `exists`/`unknown`: another writer got there first (an admin, a replica that held the lease a moment ago): the next answer sees it.
    if (outcome !== 'done') this.options.logger?.debug({ change, outcome }, 'backend discovery: change already made');
  }

  private owned(): OwnedBackend[] {
    const prefix = `${this.options.source.name}@`;
    const { registry } = this.options;
    return registry.backends
      .filter((backend) => backend.id.startsWith(prefix))
      .map((backend) => ({
        id: backend.id,
        url: backend.url,
        drained: registry.isDrained(backend.id),
        role: backend.role,
      }));
  }
}
