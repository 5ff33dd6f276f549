import type { FastifyBaseLogger } from 'fastify';
import type { Dealer, Subscriber } from 'zeromq';
import { applyDecodedBatch, type ApplyToIndex, type RankTarget } from './apply-batch';
import { BlockNames } from './block-names';
import type { KvEventsMetricsSink, ZeromqModule } from './kv-events-metrics';
import { openLiveSocket } from './live-socket';
import { decodeBatch, END_SEQ, KvEventsWireError, readSequence, sequenceFrame, type WireLimits } from './wire';

export type { KvEventsMetricsSink, KvEventsProblem, ZeromqModule } from './kv-events-metrics';

export interface RankSubscriptionOptions {
  readonly zmq: ZeromqModule;
  readonly target: RankTarget;
  /** PUB endpoint to connect to (`tcp://host:port`), and the replay ROUTER's (null: gaps resynchronise). */
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  /** Topic prefix subscribed to ('' = all, vLLM's default topic). */
  readonly topic: string;
  readonly apply: ApplyToIndex;
  readonly limits: WireLimits;
  /** Batches waiting to be applied at most (received and set aside during a replay, each); beyond, dropped. */
  readonly maxQueuedBatches: number;
  /** A replay that has not ended (END_SEQ) after this long is given up, and the rank resynchronised. */
  readonly replayTimeoutMs: number;
  /** Engine blocks named per rank at most (BlockNames). */
  readonly namesPerRank: number;
  /** The clock leaseRenewed's deadline is read against, ms. */
  readonly nowMs: () => number;
  readonly metrics: KvEventsMetricsSink;
  readonly logger?: FastifyBaseLogger;
}

interface Item {
  /** 'forget': a resync decided while no batch was left to carry it (a replay ended or timed out). */
  readonly source: 'live' | 'replay' | 'forget';
  /** Which replay it came from (a replay given up or superseded leaves batches in the queue: skipped). */
  readonly replay?: number;
  readonly seq: bigint;
  readonly payload: Uint8Array;
}

/**
 * One backend rank's event stream, read by one poller replica at a time (KvEventsIndexer holds the
 * lease): a SUB socket on the rank's PUB endpoint, batches applied strictly in sequence order.
 * - From a cursor (the last sequence applied, by this replica or a dead one): the replay socket is
 *   asked for everything it buffered (from 0): batches up to the cursor only warm the block names
 *   (the map is per process), later ones are applied. Live batches wait meanwhile.
 * - A gap (a live sequence past the next): replay from the next; the replay's first batch past it
 *   (the publisher's buffer no longer reaches back), a replay that does not end, or no replay socket:
 *   resync (the rank's ownership forgotten at once, then applied from there on).
 * - The live sequence going backwards: the publisher restarted (vLLM numbers from 0 per process):
 *   resync, and replay the new publisher's buffer from 0.
 * - AllBlocksCleared: forgotten at once too (apply-batch.ts).
 * - Past the lease's deadline (a renewal late or failing) nothing is written: the first batch not written is held
 *   back, nothing after it is applied (nor taken for a gap), and once the lease is renewed a replay from the cursor
 *   brings it back (a lease lost instead: the next holder replays from the cursor).
 * Bad input is counted and skipped, never thrown: malformed frames or msgpack, unknown events,
 * oversized batches (dropped whole), a full queue (dropped, then found as a gap).
 */
export class RankSubscription {
  private readonly names: BlockNames;
  private readonly pools = new Set<string>();
  private subscriber: Subscriber | null = null;
  private dealer: Dealer | null = null;
  private readonly queue: Item[] = [];
  private setAside: Item[] = [];
  private draining: Promise<void> | null = null;
  private stopped = false;
  /** Last sequence applied (the cursor); null = none yet, the next batch is the baseline. */
  private applied: bigint | null = null;
  /** Highest live sequence seen (a live sequence at or below it means the publisher restarted). */
  private liveHigh: bigint | null = null;
  /** Batches of a replay up to this only warm the names (applied before the takeover). */
  private warmUntil: bigint | null = null;
  /** Highest sequence the running replay delivered (END_SEQ aside): a takeover's replay must reach warmUntil. */
  private replayHigh: bigint | null = null;
  private replaying = false;
  private replayNumber = 0;
  /** The payload of the batch applied last: a replay from that sequence number must start with it, else the publisher restarted. */
  private appliedPayload: Uint8Array | null = null;
  /** The running replay starts at `applied` to check the publisher is the same one (its first batch must match). */
  private verifying = false;
  private replayTimer: NodeJS.Timeout | null = null;
  private resyncNext = false;
  /** The lease is ours until then at least (ms, nowMs): past it, another replica may hold it, so nothing is written. */
  private leaseUntilMs = Number.NEGATIVE_INFINITY;
  /**
   * The first batch received but not written because the lease had lapsed (null = none). Nothing past it is applied
   * until it is: the cursor would step over it and its blocks would never be named (their children orphans), and a
   * replay going on past it is not a publisher whose buffer fell short. Once the lease is renewed, a replay from the
   * cursor brings it back (leaseRenewed, retryHeldBack).
   */
  private heldBack: bigint | null = null;

  constructor(private readonly options: RankSubscriptionOptions) {
    this.names = new BlockNames(options.namesPerRank);
  }

  /** The last sequence number applied (what the lease's cursor stores). */
  get lastApplied(): bigint | null {
    return this.applied;
  }

  get rankId(): string {
    return this.options.target.rankId;
  }

  /** The lease was renewed: valid until `untilMs` (the TTL from before the renewal was asked). */
  leaseRenewed(untilMs: number): void {
    this.leaseUntilMs = untilMs;
    // A batch held back while it had lapsed is fetched again now: an idle publisher may send nothing else to show the hole.
    if (this.heldBack !== null && !this.replaying && !this.stopped && this.options.nowMs() <= untilMs)
      this.replayFromCursor();
  }

  /** Starts reading from `cursor`; throws when zeromq refuses an endpoint (the caller stops it). */
  start(cursor: bigint | null): void {
    const { options } = this;
    this.applied = cursor;
    // A publisher that restarted numbers from 0 again: when the SUB reconnects, the replay socket is asked
    // for the last batch applied, which the same publisher still holds byte for byte.
    this.subscriber = openLiveSocket(options, () => {
      if (!this.replaying && this.applied !== null && this.appliedPayload !== null)
        this.requestReplay(this.applied, true);
    });
    void this.readLive(this.subscriber);
    if (options.replayEndpoint !== null) {
      this.warmUntil = cursor;
      this.requestReplay(0n);
    } else if (cursor !== null) {
      // What came between the cursor and now is unknown without a replay socket.
      this.resyncNext = true;
      this.applied = null;
    }
  }

  /** Closes the sockets and waits for the batch being applied; returns the last sequence applied. */
  async stop(): Promise<bigint | null> {
    this.stopped = true;
    this.endReplay();
    this.subscriber?.close();
    this.subscriber = null;
    this.queue.length = 0;
    this.setAside = [];
    await this.draining;
    return this.applied;
  }

  private async readLive(subscriber: Subscriber): Promise<void> {
    try {
      for await (const frames of subscriber) {
        const seq = frames.length === 3 ? readSequence(frames[1]) : null;
        if (seq === null) this.options.metrics.recordKvProblem('malformed_batch');
        else this.enqueue({ source: 'live', seq, payload: frames[2] as Uint8Array });
      }
    } catch (error) {
      if (!this.stopped) this.options.logger?.warn({ err: error, rank: this.rankId }, 'KV-event subscriber stopped');
    }
  }

  private enqueue(item: Item): void {
    if (this.stopped) return;
    if (this.queue.length >= this.options.maxQueuedBatches) {
      this.options.metrics.recordKvBatch('dropped');
      this.options.metrics.recordKvProblem('queue_overflow');
      return;
    }
    this.queue.push(item);
    this.kick();
  }

  /** Starts the one drain loop unless it runs (the loop applies one batch at a time, in order). */
  private kick(): void {
    if (this.draining !== null || this.queue.length === 0 || this.stopped) return;
    this.draining = this.drain().finally(() => {
      this.draining = null;
      this.kick();
    });
  }

  /** Waits until the queue has room (a replay is read as fast as batches are applied; the socket buffers the rest). */
  private async roomInQueue(): Promise<void> {
    while (this.queue.length >= this.options.maxQueuedBatches && !this.stopped)
      await new Promise((resolve) => setTimeout(resolve, 2));
  }

  private async drain(): Promise<void> {
    for (let item = this.queue.shift(); item !== undefined && !this.stopped; item = this.queue.shift()) {
      if (item.source === 'live') await this.onLive(item);
      else if (item.source === 'replay') await this.onReplayed(item);
      else if (this.resyncNext) await this.forgetNow();
    }
  }

  private async onLive(item: Item): Promise<void> {
    const { metrics } = this.options;
    if (this.replaying) {
      if (this.setAside.length >= this.options.maxQueuedBatches) {
        metrics.recordKvBatch('dropped');
        metrics.recordKvProblem('queue_overflow');
      } else this.setAside.push(item);
      return;
    }
    const restarted = this.liveHigh !== null && item.seq <= this.liveHigh;
    this.liveHigh = item.seq;
    if (restarted) {
      metrics.recordKvProblem('sequence_backwards');
      metrics.recordKvResync('restart');
      this.resyncNext = true;
      this.applied = null;
      this.heldBack = null;
      if (this.options.replayEndpoint !== null) {
        this.warmUntil = null;
        this.setAside.push(item);
        this.requestReplay(0n);
        return;
      }
    }
    if (this.heldBack !== null && item.seq > this.heldBack) return this.pastHeldBack(item);
    const applied = this.applied;
    if (applied === null || item.seq === applied + 1n) return this.applyItem(item, false);
    if (item.seq <= applied) {
      metrics.recordKvBatch('duplicate'); // a replay delivered it already
      return;
    }
    metrics.recordKvProblem('sequence_gap');
    if (this.options.replayEndpoint === null) {
      metrics.recordKvResync('gap');
      this.resyncNext = true;
      return this.applyItem(item, false);
    }
    this.setAside.push(item);
    this.replayFromCursor();
  }

  /** A live batch past one held back (the lease had lapsed): no gap in the stream, it waits for that one. */
  private async pastHeldBack(item: Item): Promise<void> {
    const { metrics } = this.options;
    if (this.leaseLapsed()) {
      // Still in the publisher's buffer: the replay asked at the renewal brings it back after the held-back one.
      metrics.recordKvBatch('dropped');
      return;
    }
    if (this.options.replayEndpoint === null) {
      // Nothing brings the held-back batch back: what it stored is unknown, as after a gap.
      metrics.recordKvResync('gap');
      this.resyncNext = true;
      this.heldBack = null;
      return this.applyItem(item, false);
    }
    this.setAside.push(item);
    this.replayFromCursor();
  }

  /** Replays from the cursor: from the batch applied last when its payload is known, to tell a gap from a restart whose numbers passed ours. */
  private replayFromCursor(): void {
    const applied = this.applied;
    if (applied === null) this.requestReplay(0n);
    else if (this.appliedPayload !== null) this.requestReplay(applied, true);
    else this.requestReplay(applied + 1n);
  }

  private async onReplayed(item: Item): Promise<void> {
    const { metrics } = this.options;
    if (item.replay !== this.replayNumber || !this.replaying) return;
    if (this.verifying) {
      this.verifying = false;
      const same =
        item.seq === this.applied &&
        this.appliedPayload !== null &&
        Buffer.from(item.payload).equals(this.appliedPayload);
      if (!same && (item.seq === END_SEQ || item.seq === this.applied)) {
        // Its buffer ends before our last batch, or holds another batch under its number: a new publisher.
        this.restartFromZero();
        return;
      }
      if (same) {
        metrics.recordKvBatch('duplicate');
        return;
      }
    }
    if (item.seq === END_SEQ) return this.replayEnded();
    const delivered = this.replayHigh;
    if (delivered === null || item.seq > delivered) this.replayHigh = item.seq;
    if (this.warmUntil !== null && item.seq <= this.warmUntil) return this.applyItem(item, true);
    const applied = this.applied;
    if (applied !== null && item.seq <= applied) {
      metrics.recordKvBatch('duplicate');
      return;
    }
    const heldBack = this.heldBack;
    if (heldBack !== null && item.seq > heldBack && delivered !== null && delivered >= heldBack) {
      // This replay brought the held-back batch while the lease had lapsed: applying what follows would step over it
      // (and a renewal meanwhile would let it through). The replay asked once the lease is renewed brings both.
      metrics.recordKvBatch('dropped');
      return;
    }
    if (applied !== null && item.seq > applied + 1n) {
      // The publisher's buffer no longer reaches back to the gap.
      this.resyncAfterShortReplay();
    }
    return this.applyItem(item, false);
  }

  private async applyItem(item: Item, nameOnly: boolean): Promise<void> {
    const { metrics, limits } = this.options;
    if (!nameOnly && this.leaseLapsed()) {
      // Not applied: the cursor stays, and the replay from it once the lease is renewed (or the next holder's) brings it back.
      if (this.heldBack === null || item.seq < this.heldBack) this.heldBack = item.seq;
      metrics.recordKvBatch('dropped');
      return;
    }
    // Written now, or failing as any batch can (apply_failed): no longer held back by the lease.
    if (!nameOnly && this.heldBack !== null && item.seq >= this.heldBack) this.heldBack = null;
    let decoded: ReturnType<typeof decodeBatch> | null = null;
    try {
      decoded = decodeBatch(item.payload, limits);
    } catch (error) {
      metrics.recordKvProblem(error instanceof KvEventsWireError ? error.problem : 'malformed_batch');
    }
    if (decoded !== null) {
      if (decoded.unknown > 0) metrics.recordKvProblem('unknown_event', decoded.unknown);
      if (decoded.malformed > 0) metrics.recordKvProblem('malformed_event', decoded.malformed);
      if (decoded.ignored > 0) metrics.recordKvProblem('ignored_event', decoded.ignored);
      const clear = this.resyncNext && !nameOnly;
      try {
        const outcome = await applyDecodedBatch(
          this.options.apply,
          this.options.target,
          this.names,
          this.pools,
          decoded,
          {
            clear,
            nameOnly,
          },
        );
        if (decoded.events.some((event) => event.kind === 'cleared') && !nameOnly) metrics.recordKvResync('cleared');
        if (outcome.orphanBlocks > 0) metrics.recordKvProblem('orphan_block', outcome.orphanBlocks);
        if (outcome.unknownHashes > 0) metrics.recordKvProblem('unknown_hash', outcome.unknownHashes);
        if (outcome.storedBlocks > 0) metrics.recordKvBlocks('stored', outcome.storedBlocks);
        if (outcome.removedEntries > 0) metrics.recordKvBlocks('removed', outcome.removedEntries);
        if (clear) this.resyncNext = false;
      } catch (error) {
        // Not applied: the cursor stays, and the next batch finds the gap and replays this one.
        metrics.recordKvProblem('apply_failed');
        this.options.logger?.warn({ err: error, rank: this.rankId }, 'could not apply a KV-event batch');
        return;
      }
    }
    metrics.recordKvBatch(nameOnly ? 'named_only' : 'applied');
    if (!nameOnly) {
      this.applied = item.seq;
      this.appliedPayload = item.payload;
    }
  }

  /** Forgets the rank in every pool it wrote to, now: a resync that no batch is left to carry. */
  private async forgetNow(): Promise<void> {
    const { options } = this;
    if (this.leaseLapsed()) return; // resyncNext stays: the next batch applied carries the forget.
    const nothing = { events: [], rank: null, unknown: 0, malformed: 0, ignored: 0 };
    try {
      await applyDecodedBatch(options.apply, options.target, this.names, this.pools, nothing, {
        clear: true,
        nameOnly: false,
      });
      this.resyncNext = false;
    } catch (error) {
      // The next batch applied carries the forget instead.
      options.metrics.recordKvProblem('apply_failed');
      options.logger?.warn({ err: error, rank: this.rankId }, 'could not forget a resynchronised rank');
    }
  }

  /** Past the local lease deadline (a renewal late or failing): counted, and nothing is written. */
  private leaseLapsed(): boolean {
    if (this.options.nowMs() <= this.leaseUntilMs) return false;
    this.options.metrics.recordKvProblem('lease_expired');
    return true;
  }

  /** Asks the replay socket for every buffered batch from `from` (one replay at a time, on a fresh DEALER). */
  private requestReplay(from: bigint, verify = false): void {
    const endpoint = this.options.replayEndpoint;
    if (endpoint === null || this.stopped) return;
    this.endReplay();
    this.replaying = true;
    this.verifying = verify;
    this.replayHigh = null;
    this.replayNumber += 1;
    const replay = this.replayNumber;
    const dealer = new this.options.zmq.Dealer({ linger: 0, maxMessageSize: this.options.limits.maxBatchBytes ?? -1 });
    this.dealer = dealer;
    dealer.connect(endpoint);
    this.replayTimer = setTimeout(() => this.replayTimedOut(), this.options.replayTimeoutMs);
    void (async () => {
      try {
        // ROUTER sees [identity, empty, start seq]: the DEALER sends the empty delimiter itself.
        await dealer.send([Buffer.alloc(0), sequenceFrame(from)]);
        for await (const frames of dealer) {
          const seq = frames.length >= 2 ? readSequence(frames[1]) : null;
          if (seq === null) {
            this.options.metrics.recordKvProblem('malformed_batch');
            continue;
          }
          await this.roomInQueue();
          if (this.dealer !== dealer) break;
          this.enqueue({ source: 'replay', replay, seq, payload: (frames[2] ?? Buffer.alloc(0)) as Uint8Array });
          if (seq === END_SEQ) break;
        }
      } catch {
        // Closed (replay ended, timed out, or the subscription stopped).
      }
    })();
  }

  /**
   * END_SEQ. A takeover's replay (warmUntil set) that delivered nothing at or above the cursor came from
   * another process: the same publisher still holds the batch at the cursor, or (its buffer no longer
   * reaching back) later ones, found as replay_short. A restarted engine numbers from 0 again: its
   * batches were only used to warm the names, so the rank is forgotten and its buffer replayed from 0.
   */
  private replayEnded(): void {
    const warmUntil = this.warmUntil;
    if (warmUntil === null || (this.replayHigh !== null && this.replayHigh >= warmUntil)) return this.finishReplay();
    this.options.logger?.info(
      { rank: this.rankId, cursor: warmUntil.toString(), replayHigh: this.replayHigh?.toString() ?? null },
      'KV-event publisher restarted since the cursor was stored: rank resynchronised',
    );
    this.restartFromZero();
  }

  /** The publisher restarted: the rank is resynchronised from what its new buffer holds, from sequence 0. */
  private restartFromZero(): void {
    this.options.metrics.recordKvProblem('sequence_backwards');
    this.options.metrics.recordKvResync('restart');
    this.resyncNext = true;
    this.applied = null;
    this.appliedPayload = null;
    this.heldBack = null;
    this.warmUntil = null;
    this.requestReplay(0n);
  }

  /** A replay that does not reach back to what was missed: what the publisher held then is unknown. */
  private resyncAfterShortReplay(): void {
    this.options.metrics.recordKvProblem('replay_short');
    this.options.metrics.recordKvResync('gap');
    this.resyncNext = true;
    this.heldBack = null;
  }

  private replayTimedOut(): void {
    this.options.metrics.recordKvProblem('replay_timeout');
    this.options.metrics.recordKvResync('gap');
    this.resyncNext = true;
    this.applied = null;
    // The resync forgets the rank: what the held-back batch stored is unknown, like the rest.
    this.heldBack = null;
    this.finishReplay();
  }

  /**
   * A replay ended with a batch held back. True when a replay from the cursor was asked for instead (the lease was
   * renewed since the replay brought it). Still lapsed: leaseRenewed asks for it. A replay that never reached it:
   * the publisher no longer holds it, and the rank is resynchronised as after a short replay.
   */
  private retryHeldBack(): boolean {
    const heldBack = this.heldBack;
    if (heldBack === null) return false;
    if (this.replayHigh === null || this.replayHigh < heldBack) {
      this.resyncAfterShortReplay();
      return false;
    }
    if (this.options.nowMs() > this.leaseUntilMs) return false;
    this.warmUntil = null;
    this.replayFromCursor();
    return true;
  }

  private endReplay(): void {
    if (this.replayTimer !== null) clearTimeout(this.replayTimer);
    this.replayTimer = null;
    this.dealer?.close();
    this.dealer = null;
    this.replaying = false;
    this.verifying = false;
  }

  /** The replay ended: the live batches set aside meanwhile go through in order (duplicates skipped). */
  private finishReplay(): void {
    if (this.retryHeldBack()) return; // the live batches set aside wait for that replay
    this.endReplay();
    this.warmUntil = null;
    const waiting = this.setAside;
    this.setAside = [];
    // Ahead of whatever arrived since: they were received first. A resync decided meanwhile (a restart, a
    // timeout) forgets the rank first, at once: an idle publisher may send no batch to carry it for long.
    const forget: Item[] = this.resyncNext ? [{ source: 'forget', seq: -1n, payload: new Uint8Array(0) }] : [];
    this.queue.unshift(...forget, ...waiting.map((item) => ({ ...item, source: 'live' as const })));
    // Set aside before liveHigh moved past them: they are not a restart.
    if (waiting.length > 0) this.liveHigh = (waiting[0] as Item).seq - 1n;
    this.kick();
  }
}
