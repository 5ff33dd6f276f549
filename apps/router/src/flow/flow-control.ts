import type { FlowCapacity, FlowEntry, FlowQueueStore, FlowReply } from '@kvroute/redis-store';
import type { FastifyBaseLogger } from 'fastify';
import { RouterError } from '../errors';
import type { FlowSettings } from './flow-config';
import { StrayEntries } from './stray-entries';

/**
 * Flow control (issue 30): when a pool is saturated, requests wait here, in the router, instead of in the
 * engines' queues, and leave in a fair order. Admission and order are one queue per pool shared by every
 * replica (flow-queue.lua: start-time fair queuing by tokens within a priority class), so a tenant's
 * share holds across replicas; each replica keeps its own waiting requests in memory and asks for its
 * turn, its best request first, when one of its requests ends or every `pollMs`. While Redis is away the
 * same queue runs in this process (local-flow-queue.ts): fairness per replica, said in a log line and
 * the `kvroute_router_flow_shared` gauge.
 *
 * Bounds: per pool and replica at most `maxQueuedRequests` and `maxQueuedBytes` (bodies held) waiting;
 * a request waits at most `maxQueueWaitMs`, and one whose predicted wait (its position × the pool's
 * mean service time ÷ requests in flight) exceeds PREDICTION_MARGIN of it is shed at once: 429 with
 * Retry-After, in the time of one Redis call, rarely a request that waits its whole deadline and then fails.
 */
export interface FlowControlDeps {
  readonly settings: FlowSettings;
  /** The fleet's queue (Redis); null: this replica's only. */
  readonly shared: FlowQueueStore | null;
  readonly local: FlowQueueStore;
  /** Monotonic ms. */
  readonly nowMs: () => number;
  readonly metrics: FlowMetricsSink;
  readonly logger: FastifyBaseLogger;
  /**
   * Replicas in the fleet (their Redis heartbeats; the last count while Redis is away). While the shared
   * queue is down each replica admits its share of the pool's capacity, so N replicas do not run N pools' worth.
   */
  readonly liveReplicas?: () => number;
}

/** What flow control tells the metrics (router-metrics.ts implements it). */
export interface FlowMetricsSink {
  recordFlowAdmitted(model: string, priorityClass: number, queued: boolean, waitSeconds: number): void;
  recordFlowShed(model: string, priorityClass: number, reason: FlowShedReason): void;
  recordFlowShared(shared: boolean): void;
}

export type FlowShedReason = 'queue-full' | 'predicted-wait' | 'deadline';

/** An admitted request's hold on its pool's capacity: `release` once when it ends (idempotent). */
export interface FlowSlot {
  /** How long it waited in the queue, ms (0: admitted at once). */
  readonly waitedMs: number;
  release(): void;
}

interface Waiter {
  readonly entry: FlowEntry;
  /** Its place in its store's order (FlowReply.order): the shared queue's, or this replica's once it moved here. */
  order: number;
  readonly bytes: number;
  readonly enteredAtMs: number;
  store: FlowQueueStore;
  readonly capacity: () => FlowCapacity;
  readonly resolve: (slot: FlowSlot) => void;
  readonly reject: (error: RouterError) => void;
  timer: NodeJS.Timeout | null;
}

interface PoolWaiters {
  readonly waiters: Waiter[];
  bytes: number;
  pumping: boolean;
  /** Wakes a pump that sleeps until the next poll. */
  wake: (() => void) | null;
  /** Mean time an admitted request holds its slot, ms (EWMA; 0 until one ended). */
  meanServiceMs: number;
}

/** How much a new service time moves the mean. */
const SERVICE_EWMA_ALPHA = 0.2;
/**
 * The share of `maxQueueWaitMs` a request may be predicted to wait and still queue. Slots free at random
 * (a pool's requests end when they end): with the whole deadline as the cut, a fifth of the requests
 * queued under a greedy tenant waited it out and were shed late (measured, bench:admission); at half,
 * the shed answer comes at once for nearly all.
 */
const PREDICTION_MARGIN = 0.5;

const clientGone = (): RouterError =>
  new RouterError('ROUTER_ERR_CLIENT_GONE', 'The client closed the request while it waited.');

export class FlowControl {
  readonly #deps: FlowControlDeps;
  /**
   * Per pool (a model the router serves: the queue stage runs after the model is allowed), never forgotten: a
   * request holds its pool's list across the queue's answer, and a list dropped meanwhile left it waiting where its
   * deadline could not find it (a hang, 2026-12-07). One small entry per model served.
   */
  readonly #pools = new Map<string, PoolWaiters>();
  /** The shared queue failed: local until then (monotonic ms). */
  #sharedDownUntilMs = 0;
  #sharedUp = true;
  /** Entries a failed shared call may have left in the fleet's queue (stray-entries.ts). */
  readonly #strays = new StrayEntries();

  constructor(deps: FlowControlDeps) {
    this.#deps = deps;
    deps.metrics.recordFlowShared(deps.shared !== null);
  }

  /** Requests waiting on this replica, per pool (for /debug/flow and the gauge). */
  waiting(): ReadonlyMap<
    string,
    { readonly requests: number; readonly bytes: number; readonly meanServiceMs: number }
  > {
    const out = new Map<string, { requests: number; bytes: number; meanServiceMs: number }>();
    for (const [pool, waiters] of this.#pools) {
      out.set(pool, { requests: waiters.waiters.length, bytes: waiters.bytes, meanServiceMs: waiters.meanServiceMs });
    }
    return out;
  }

  /**
   * What /debug/flow shows: per pool this replica has queued for, this replica's waiting
   * requests and the queue's (shared or local) admitted and waiting counts.
   */
  async describe(): Promise<Record<string, unknown>> {
    const store = this.#store();
    const pools: Record<string, unknown> = {};
    for (const [pool, here] of this.waiting()) {
      const queue = await store.inspect(pool).catch(() => null);
      pools[pool] = {
        waitingHere: here.requests,
        waitingBytesHere: here.bytes,
        meanServiceMs: here.meanServiceMs,
        queue,
      };
    }
    return { shared: this.sharesQueue, settings: this.#deps.settings, pools };
  }

  get sharesQueue(): boolean {
    return this.#deps.shared !== null && this.#sharedUp;
  }

  /**
   * Admits `entry` to `pool` at once, or after a wait; throws a 429 RouterError when it is shed. `capacity`
   * is read again at every poll (the engines' saturation changes). `signal`: the client went away.
   */
  async admit(
    pool: string,
    entry: FlowEntry,
    bytes: number,
    capacity: () => FlowCapacity,
    signal?: AbortSignal,
  ): Promise<FlowSlot> {
    const { settings } = this.#deps;
    const waiters = this.#poolWaiters(pool);
    // Something already waits here: this one would too, behind a full queue.
    if (this.#full(waiters, bytes)) throw this.#shed(pool, entry, 'queue-full', settings.maxQueueWaitMs);
    const enteredAtMs = this.#deps.nowMs();
    const { store, reply } = await this.#enter(pool, entry, capacity);
    // While the queue answered, the client may have gone and others may have filled the queue: what the queue
    // gave this request (a slot, a place) goes back at once, not after a deadline or a lease.
    if (signal?.aborted) {
      if (reply.kind !== 'gone') void this.#leave(store, pool, entry.id);
      throw clientGone();
    }
    if (reply.kind === 'admitted') {
      this.#deps.metrics.recordFlowAdmitted(pool, entry.priorityClass, false, 0);
      return this.#slot(pool, entry, store, null);
    }
    if (reply.kind === 'gone') throw this.#shed(pool, entry, 'deadline', settings.maxQueueWaitMs);
    const predictedMs = (reply.position * waiters.meanServiceMs) / Math.max(1, reply.inflight);
    const shed: FlowShedReason | null = this.#full(waiters, bytes)
      ? 'queue-full'
      : predictedMs > settings.maxQueueWaitMs * PREDICTION_MARGIN
        ? 'predicted-wait'
        : null;
    if (shed !== null) {
      void this.#leave(store, pool, entry.id);
      throw this.#shed(pool, entry, shed, shed === 'queue-full' ? settings.maxQueueWaitMs : predictedMs);
    }
    return this.#wait(pool, waiters, { entry, order: reply.order, bytes, enteredAtMs, store, capacity }, signal);
  }

  /** Whether `waiters` has no room for one more request of `bytes` (maxQueuedRequests, maxQueuedBytes). */
  #full(waiters: PoolWaiters, bytes: number): boolean {
    const { settings } = this.#deps;
    return waiters.waiters.length >= settings.maxQueuedRequests || waiters.bytes + bytes > settings.maxQueuedBytes;
  }

  /** Enters the shared queue, or this replica's when the shared one fails; says which answered. */
  async #enter(
    pool: string,
    entry: FlowEntry,
    capacity: () => FlowCapacity,
  ): Promise<{ store: FlowQueueStore; reply: FlowReply }> {
    const { maxQueueWaitMs } = this.#deps.settings;
    const store = this.#store();
    try {
      return { store, reply: await store.enter(pool, entry, this.#capacityIn(store, capacity), maxQueueWaitMs) };
    } catch (error) {
      this.#sharedFailed(error);
      if (store !== this.#deps.local) this.#strays.leave(store, pool, entry.id);
      const local = this.#deps.local;
      return { store: local, reply: await local.enter(pool, entry, this.#capacityIn(local, capacity), maxQueueWaitMs) };
    }
  }

  /** Waits in `waiters` (the pool's current list) until the pump admits it, its deadline passes or the client goes. */
  #wait(
    pool: string,
    waiters: PoolWaiters,
    queued: Pick<Waiter, 'entry' | 'order' | 'bytes' | 'enteredAtMs' | 'store' | 'capacity'>,
    signal: AbortSignal | undefined,
  ): Promise<FlowSlot> {
    const { settings } = this.#deps;
    return new Promise<FlowSlot>((resolve, reject) => {
      const waiter: Waiter = { ...queued, resolve, reject, timer: null };
      const giveUp = (reason: RouterError): void => {
        if (!this.#remove(pool, waiter)) return;
        void this.#leave(waiter.store, pool, waiter.entry.id);
        reject(reason);
      };
      waiter.timer = setTimeout(
        () => giveUp(this.#shed(pool, waiter.entry, 'deadline', settings.maxQueueWaitMs)),
        settings.maxQueueWaitMs,
      );
      signal?.addEventListener('abort', () => giveUp(clientGone()), { once: true });
      this.#insert(waiters, waiter);
      this.#startPump(pool);
    });
  }

  /** Starts (or wakes) the pool's pump; a pump that fails is logged, and its waiters still end by their deadlines. */
  #startPump(pool: string): void {
    this.#pump(pool).catch((error: unknown) =>
      this.#deps.logger.warn(
        { err: error, pool },
        'flow control: a queue poll failed; its waiters end by their deadline',
      ),
    );
  }

  #poolWaiters(pool: string): PoolWaiters {
    let waiters = this.#pools.get(pool);
    if (waiters === undefined) {
      waiters = { waiters: [], bytes: 0, pumping: false, wake: null, meanServiceMs: 0 };
      this.#pools.set(pool, waiters);
    }
    return waiters;
  }

  /**
   * Keeps the pool's waiters in the queue's order: score, then id, as a sorted set breaks ties. Each replica polls
   * only its first waiter, so a replica ordering a tie otherwise (by arrival) could poll the one the queue ranks
   * second while a slot waits for the one it ranks first, unpolled, until a deadline.
   */
  #insert(waiters: PoolWaiters, waiter: Waiter): void {
    const after = (other: Waiter): boolean =>
      other.order > waiter.order || (other.order === waiter.order && other.entry.id > waiter.entry.id);
    let at = waiters.waiters.length;
    while (at > 0 && after(waiters.waiters[at - 1] as Waiter)) at--;
    waiters.waiters.splice(at, 0, waiter);
    waiters.bytes += waiter.bytes;
  }

  /** Takes `waiter` out of its pool's list; `endWait` false: to put it back elsewhere (its deadline still runs). */
  #remove(pool: string, waiter: Waiter, endWait = true): boolean {
    const waiters = this.#pools.get(pool);
    const at = waiters?.waiters.indexOf(waiter) ?? -1;
    if (waiters === undefined || at === -1) return false;
    waiters.waiters.splice(at, 1);
    waiters.bytes -= waiter.bytes;
    if (endWait && waiter.timer !== null) clearTimeout(waiter.timer);
    return true;
  }

  /** Asks for the first waiter's turn until none waits: at once after an admission or a local end, else every pollMs. */
  async #pump(pool: string): Promise<void> {
    const waiters = this.#pools.get(pool);
    if (waiters === undefined || waiters.pumping) {
      waiters?.wake?.();
      return;
    }
    waiters.pumping = true;
    try {
      while (waiters.waiters.length > 0) {
        const head = waiters.waiters[0] as Waiter;
        const reply = await this.#poll(pool, head);
        if (!waiters.waiters.includes(head)) {
          // It gave up (deadline, client gone) while asking: a slot or a place it was given goes back at once
          // (a failed shared poll re-entered it in this replica's queue, after its give-up had left the shared one).
          if (reply.kind !== 'gone') void this.#leave(head.store, pool, head.entry.id);
          continue;
        }
        if (reply.kind === 'admitted') {
          this.#remove(pool, head);
          const waitedMs = this.#deps.nowMs() - head.enteredAtMs;
          this.#deps.metrics.recordFlowAdmitted(pool, head.entry.priorityClass, true, waitedMs / 1000);
          head.resolve(this.#slot(pool, head.entry, head.store, head.enteredAtMs));
          continue;
        }
        if (reply.kind === 'gone') {
          this.#remove(pool, head);
          head.reject(this.#shed(pool, head.entry, 'deadline', this.#deps.settings.maxQueueWaitMs));
          continue;
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.#deps.settings.pollMs);
          waiters.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        waiters.wake = null;
      }
    } finally {
      waiters.pumping = false;
    }
  }

  /** One poll; a shared queue that fails moves the waiter to this replica's queue. */
  async #poll(pool: string, waiter: Waiter): Promise<FlowReply> {
    try {
      return await waiter.store.poll(pool, waiter.entry.id, this.#capacityIn(waiter.store, waiter.capacity));
    } catch (error) {
      if (waiter.store === this.#deps.local) throw error;
      this.#sharedFailed(error);
      this.#strays.leave(waiter.store, pool, waiter.entry.id);
      waiter.store = this.#deps.local;
      const capacity = this.#capacityIn(waiter.store, waiter.capacity);
      const reply = await this.#deps.local.enter(pool, waiter.entry, capacity, this.#deps.settings.maxQueueWaitMs);
      // Its place is now in this replica's order, which the list must follow (the pump polls its first waiter).
      if (reply.kind === 'queued' && this.#remove(pool, waiter, false)) {
        waiter.order = reply.order;
        this.#insert(this.#poolWaiters(pool), waiter);
      }
      return reply;
    }
  }

  /** `enteredAtMs`: when it joined the queue; null: admitted without waiting. */
  #slot(pool: string, entry: FlowEntry, store: FlowQueueStore, enteredAtMs: number | null): FlowSlot {
    const admittedAtMs = this.#deps.nowMs();
    const ttl = this.#deps.settings.leaseTtlMs;
    const renew = setInterval(
      () => {
        store.renew(pool, entry.id, ttl).catch(() => undefined);
      },
      Math.max(1, Math.floor(ttl / 3)),
    );
    renew.unref();
    let released = false;
    return {
      waitedMs: enteredAtMs === null ? 0 : admittedAtMs - enteredAtMs,
      release: () => {
        if (released) return;
        released = true;
        clearInterval(renew);
        const waiters = this.#poolWaiters(pool);
        const serviceMs = this.#deps.nowMs() - admittedAtMs;
        waiters.meanServiceMs =
          waiters.meanServiceMs === 0
            ? serviceMs
            : waiters.meanServiceMs + SERVICE_EWMA_ALPHA * (serviceMs - waiters.meanServiceMs);
        void this.#leave(store, pool, entry.id).then(() => this.#startPump(pool));
      },
    };
  }

  async #leave(store: FlowQueueStore, pool: string, id: string): Promise<void> {
    try {
      await store.leave(pool, id);
    } catch (error) {
      // The slot's lease expires by itself (leaseTtlMs): a lost leave costs capacity for that long.
      this.#sharedFailed(error);
    }
  }

  /** The pool's capacity as `store` admits it: this replica's share of it in its own queue while Redis is away. */
  #capacityIn(store: FlowQueueStore, capacity: () => FlowCapacity): FlowCapacity {
    const pool = capacity();
    if (store !== this.#deps.local || this.#deps.shared === null) return pool;
    const replicas = Math.max(1, Math.floor(this.#deps.liveReplicas?.() ?? 1));
    if (replicas === 1) return pool;
    // The capacity rounds down (the engines' limit is not exceeded), the express slots up: a replica's share
    // is a handful of slots, and a light tenant needs one open beyond what a greedy one holds.
    return {
      ...pool,
      capacity: Math.max(1, Math.floor(pool.capacity / replicas)),
      expressSlots: Math.ceil(pool.expressSlots / replicas),
    };
  }

  #store(): FlowQueueStore {
    const { shared } = this.#deps;
    if (shared === null) return this.#deps.local;
    if (!this.#sharedUp && this.#deps.nowMs() >= this.#sharedDownUntilMs) this.#setSharedUp(true);
    return this.#sharedUp ? shared : this.#deps.local;
  }

  #sharedFailed(error: unknown): void {
    this.#sharedDownUntilMs = this.#deps.nowMs() + this.#deps.settings.sharedRetryMs;
    if (this.#sharedUp) {
      this.#deps.logger.warn(
        { err: error },
        'flow control: the shared queue (Redis) failed; queuing per replica (fairness holds within this replica only) until it answers',
      );
      this.#setSharedUp(false);
    }
  }

  #setSharedUp(up: boolean): void {
    this.#sharedUp = up;
    this.#deps.metrics.recordFlowShared(up);
    if (up && this.#deps.shared !== null) this.#strays.flush(this.#deps.shared);
    if (up) this.#deps.logger.info('flow control: the shared queue (Redis) is back; fairness holds across replicas');
  }

  #shed(pool: string, entry: FlowEntry, reason: FlowShedReason, retryAfterMs: number): RouterError {
    this.#deps.metrics.recordFlowShed(pool, entry.priorityClass, reason);
    const why =
      reason === 'queue-full'
        ? 'its queue is full'
        : reason === 'predicted-wait'
          ? `it could not start within ${this.#deps.settings.maxQueueWaitMs} ms`
          : `it waited ${this.#deps.settings.maxQueueWaitMs} ms, the most a request waits`;
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    return new RouterError('ROUTER_ERR_POOL_SATURATED', `Every backend of this model is busy and ${why}; retry.`, {
      retryAfterSeconds: seconds,
      headers: { 'retry-after-ms': String(Math.max(1, Math.round(retryAfterMs))) },
    });
  }
}
