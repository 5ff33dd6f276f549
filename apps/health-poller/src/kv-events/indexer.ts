import type { KvEventsLeases, KvEventsLeaseState } from '@kvroute/redis-store';
import { combineHash53, hashString53 } from '@kvroute/routing';
import type { FastifyBaseLogger } from 'fastify';
import type { ApplyToIndex } from './apply-batch';
import type { RankStream } from './endpoints';
import { RankSubscription, type ZeromqModule, type KvEventsMetricsSink } from './rank-subscription';
import type { WireLimits } from './wire';

export interface KvEventsIndexerOptions {
  readonly replicaId: string;
  readonly leases: KvEventsLeases;
  readonly apply: ApplyToIndex;
  readonly nowMs: () => number;
  /** A subscription's lease TTL, ms: renewed every third of it; a dead replica's streams move within ~2 of them. */
  readonly leaseTtlMs: number;
  readonly topic: string;
  readonly limits: WireLimits;
  readonly maxQueuedBatches: number;
  readonly replayTimeoutMs: number;
  readonly namesPerRank: number;
  readonly metrics: KvEventsMetricsSink & { setKvSubscriptions(count: number): void };
  readonly logger?: FastifyBaseLogger;
}

interface Running {
  readonly stream: RankStream;
  readonly key: string;
  readonly subscription: RankSubscription;
}

/**
 * The KV-event indexer of one poller replica. The poller replicas share the rank streams: each is
 * read by the replica that wins it by rendezvous over the live replicas (heartbeats in Redis), under
 * a lease (KvEventsLeases) that its holder renews with the stream's cursor every third of the TTL.
 * - a replica that joins takes its share: the holders release those streams (cursor stored), and it
 *   acquires them at its next tick and replays from the cursor;
 * - a replica that dies stops heartbeating: after a lease TTL its streams' new winners take them once
 *   their leases expire, and replay from the last cursor it stored (batches it applied after that are
 *   applied again: harmless, apply-kv-events.lua);
 * - a replica that lost a lease (paused past the TTL) finds out at its next renewal and stops reading.
 * Backends and ranks come and go with `setStreams` (the poller's backend list).
 */
export class KvEventsIndexer {
  private streams = new Map<string, RankStream>();
  private readonly running = new Map<string, Running>();
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private closed = false;
  private zmq: ZeromqModule | null = null;
  /** Streams whose subscription could not start (rank id → stream key): not taken again until their config changes. */
  private readonly refused = new Map<string, string>();

  constructor(private readonly options: KvEventsIndexerOptions) {}

  /** The streams of every backend (all replicas are given the same list). */
  setStreams(streams: readonly RankStream[]): void {
    this.streams = new Map(streams.map((stream) => [stream.rankId, stream]));
  }

  /** Rank ids this replica reads now. */
  held(): string[] {
    return [...this.running.keys()].sort();
  }

  /** The subscription reading `rankId` here, if any (tests, diagnostics). */
  subscriptionOf(rankId: string): RankSubscription | undefined {
    return this.running.get(rankId)?.subscription;
  }

  start(): void {
    const every = Math.max(50, Math.floor(this.options.leaseTtlMs / 3));
    this.timer = setInterval(() => void this.tick(), every);
    this.timer.unref();
    void this.tick();
  }

  /** One round: heartbeat, then per stream acquire, renew with the cursor, or hand over. One at a time. */
  tick(): Promise<void> {
    this.ticking ??= this.round()
      .catch((error: unknown) => this.options.logger?.warn({ err: error }, 'KV-event leases: round failed'))
      .finally(() => {
        this.ticking = null;
      });
    return this.ticking;
  }

  private async round(): Promise<void> {
    if (this.closed || (this.streams.size === 0 && this.running.size === 0)) return;
    const { options } = this;
    const live = await options.leases.liveReplicas(options.nowMs(), options.leaseTtlMs);
    if (!live.includes(options.replicaId)) live.push(options.replicaId);
    const work: Promise<void>[] = [];
    for (const [rankId, running] of this.running) {
      const wanted = this.streams.get(rankId);
      if (wanted === undefined || streamKey(wanted) !== running.key || ownerOf(rankId, live) !== options.replicaId)
        work.push(this.handOver(running));
    }
    await Promise.all(work);
    await Promise.all(
      [...this.streams.values()].map((stream) =>
        ownerOf(stream.rankId, live) === options.replicaId ? this.hold(stream) : undefined,
      ),
    );
    options.metrics.setKvSubscriptions(this.running.size);
  }

  private async hold(stream: RankStream): Promise<void> {
    if (this.closed) return;
    const running = this.running.get(stream.rankId);
    if (running !== undefined) {
      // Valid until the TTL from before the call: Redis set it no earlier.
      const asked = this.options.nowMs();
      const state = await this.options.leases.advance(stream.rankId, running.subscription.lastApplied);
      if (state.held) running.subscription.leaseRenewed(asked + this.options.leaseTtlMs);
      else {
        this.options.logger?.warn(
          { rank: stream.rankId },
          'KV-event lease lost: another replica reads this stream now',
        );
        this.running.delete(stream.rankId);
        await running.subscription.stop();
      }
      return;
    }
    if (this.refused.get(stream.rankId) === streamKey(stream)) return;
    const asked = this.options.nowMs();
    const state = await this.options.leases.acquire(stream.rankId);
    if (!state.held || this.running.has(stream.rankId)) return;
    // zeromq's native addon is loaded with the first stream held: a poller without KV events never loads it.
    if (!this.closed) this.zmq ??= await import('zeromq');
    // Acquired while close() ran (it waits for this round): let it go at once, not after a TTL.
    if (this.closed || this.zmq === null) {
      await this.options.leases.release(stream.rankId, state.cursor);
      return;
    }
    if (this.running.has(stream.rankId)) return;
    await this.startReading(stream, state, asked + this.options.leaseTtlMs);
  }

  /** Starts the subscription of a stream just leased; one that cannot start is let go, counted and logged once. */
  private async startReading(stream: RankStream, state: KvEventsLeaseState, leaseUntilMs: number): Promise<void> {
    const { options } = this;
    const subscription = new RankSubscription({
      zmq: this.zmq as ZeromqModule,
      target: { rankId: stream.rankId, pool: stream.pool },
      endpoint: stream.endpoint,
      replayEndpoint: stream.replayEndpoint,
      topic: options.topic,
      apply: options.apply,
      limits: options.limits,
      maxQueuedBatches: options.maxQueuedBatches,
      replayTimeoutMs: options.replayTimeoutMs,
      namesPerRank: options.namesPerRank,
      nowMs: options.nowMs,
      metrics: options.metrics,
      logger: options.logger,
    });
    this.running.set(stream.rankId, { stream, key: streamKey(stream), subscription });
    subscription.leaseRenewed(leaseUntilMs);
    try {
      subscription.start(state.cursor);
    } catch (error) {
      // zeromq throws at connect on an endpoint it cannot use (`tcp://*:5557`): nobody would read it.
      this.running.delete(stream.rankId);
      this.refused.set(stream.rankId, streamKey(stream));
      await subscription.stop();
      await options.leases.release(stream.rankId, state.cursor);
      options.metrics.recordKvProblem('subscribe_failed');
      options.logger?.error(
        { err: error, rank: stream.rankId, endpoint: stream.endpoint, replayEndpoint: stream.replayEndpoint },
        'cannot read KV events from this endpoint: left unread until its configuration changes',
      );
      return;
    }
    options.logger?.info(
      { rank: stream.rankId, endpoint: stream.endpoint, cursor: state.cursor?.toString() ?? null },
      'reading KV events',
    );
  }

  /** Stops reading a stream and releases it with its cursor (another replica's now, or gone). */
  private async handOver(running: Running): Promise<void> {
    this.running.delete(running.stream.rankId);
    const cursor = await running.subscription.stop();
    await this.options.leases.release(running.stream.rankId, cursor);
  }

  /** Stops every stream, storing each cursor, and leaves the replica set (a graceful stop). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    await this.ticking;
    await Promise.all([...this.running.values()].map((running) => this.handOver(running)));
    await this.options.leases.leave();
  }

  /** Stops reading without releasing anything, as a crash would (tests: the other replicas take over). */
  async abandon(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearInterval(this.timer);
    await this.ticking;
    await Promise.all([...this.running.values()].map((running) => running.subscription.stop()));
    this.running.clear();
  }
}

function streamKey(stream: RankStream): string {
  return `${stream.endpoint} ${stream.replayEndpoint ?? ''} ${stream.pool}`;
}

/** The replica that reads a stream: highest rendezvous score of (stream, replica), so a replica's arrival or death moves only its share. */
export function ownerOf(rankId: string, replicas: readonly string[]): string | undefined {
  const streamHash = hashString53(rankId);
  let best: string | undefined;
  let bestScore = -1;
  for (const replica of replicas) {
    const score = combineHash53(streamHash, hashString53(replica));
    if (score > bestScore || (score === bestScore && best !== undefined && replica < best)) {
      best = replica;
      bestScore = score;
    }
  }
  return best;
}
