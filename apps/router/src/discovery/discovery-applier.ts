import type { FastifyBaseLogger } from 'fastify';
import type { BackendChangeOutcome, BackendChanges } from '../backends/backend-changes';
import type { BackendRegistry } from '../backends/backend-registry';
import type { BackendSource, DiscoveryAnswer } from './backend-source';
import type { DiscoveryLeadership } from './discovery-leader';
import { planDiscoveryChanges, type DiscoveryChange, type OwnedBackend } from './discovery-plan';

/** An address policy's answer, as BackendAddressPolicy.check gives it. */
type BackendsAnswer = Extract<DiscoveryAnswer, { kind: 'backends' }>;

type UrlVerdict = { readonly allowed: true } | { readonly allowed: false; readonly reason: string };

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
  readonly nowMs: () => number;
  /** A look at the source failed (`source` = its kind): the metric. */
  readonly onFailure: (source: string) => void;
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
  private failing = false;
  private lastDropped = 0;
  private readonly refused = new Set<string>();
  private queued: BackendsAnswer | null = null;
  private applying: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(private readonly options: DiscoveryApplierOptions) {}

  /** Starts the source and resolves once its first answer is applied (so the router starts with its backends). */
  async start(): Promise<void> {
    await this.options.source.start((answer) => this.onAnswer(answer));
    this.timer = setInterval(() => {
      if (this.lastGood !== null) void this.onAnswer(this.lastGood);
    }, this.options.reapplyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.options.source.stop();
    await this.applying;
    if (this.leading) await this.options.leadership.release();
  }

  /** Hands an answer over; resolves once it (or a newer one) has been applied. Never rejects. */
  onAnswer(answer: DiscoveryAnswer): Promise<void> {
    if (answer.kind === 'failed') {
      this.options.onFailure(this.options.source.kind);
      if (!this.failing) this.options.logger?.warn({ source: this.options.source.kind, err: answer.error }, 'backend discovery: the source could not be read; keeping the backends of its last answer');
      this.failing = true;
      return this.applying ?? Promise.resolve();
    }
    if (this.failing) this.options.logger?.info({ source: this.options.source.kind }, 'backend discovery: the source answers again');
    this.failing = false;
    this.lastGood = answer;
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
      await this.apply(answer).catch((error: unknown) => this.options.logger?.error({ err: error }, 'backend discovery: could not apply an answer'));
    }
  }

  private async apply(answer: BackendsAnswer): Promise<void> {
    const { logger, source } = this.options;
    if (answer.dropped !== this.lastDropped && answer.dropped > 0) logger?.warn({ dropped: answer.dropped, kept: answer.backends.length }, 'backend discovery: more backends than discoveryMaxBackends, the rest left out');
    this.lastDropped = answer.dropped;
    const holds = await this.options.leadership.holds();
    if (holds !== this.leading) logger?.info({ source: source.kind, name: source.name }, holds ? 'backend discovery: this replica applies the changes now' : 'backend discovery: another replica applies the changes');
    this.leading = holds;
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
        logger?.warn({ err: error, change }, 'backend discovery: a change could not be made (the shared set unreachable?); tried again at the next answer');
      }
    }
    if (plan.changes.length > 0) logger?.info({ changes: plan.changes, backends: answer.backends.length }, 'backend discovery: backend set changed');
    // A change that failed is retried from the state as found (every flag), not from this answer's edges.
    this.previous = complete ? new Map(answer.backends.map((backend) => [backend.id, backend.draining])) : null;
  }

  private async run(change: DiscoveryChange): Promise<void> {
    const { changes } = this.options;
    let outcome: BackendChangeOutcome;
    if (change.op === 'add') {
      const verdict = await this.options.admitUrl(change.url);
      if (!verdict.allowed) {
        if (!this.refused.has(change.id)) this.options.logger?.warn({ backend: change.id, reason: verdict.reason }, "backend discovery: not adding a backend this replica's address policy refuses (backendAllowlist)");
        this.refused.add(change.id);
        return;
      }
      // The same engine configured or added by an admin under another id: taking it twice would double its share.
      const same = this.options.registry.findByUrl(change.url);
      if (same !== undefined && same.id !== change.id) {
        if (!this.refused.has(change.id)) this.options.logger?.warn({ backend: change.id, existing: same.id }, 'backend discovery: not adding a backend already in the set under another id');
        this.refused.add(change.id);
        return;
      }
      this.refused.delete(change.id);
      outcome = await changes.add({ id: change.id, url: change.url, weight: 1 });
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
    return registry.backends.filter((backend) => backend.id.startsWith(prefix)).map((backend) => ({ id: backend.id, url: backend.url, drained: registry.isDrained(backend.id) }));
  }
}
