import type { JobSchedulerJson, JobSchedulerTemplateOptions, JobsOptions, JobState } from 'bullmq';
import type { FastifyBaseLogger } from 'fastify';
import type { PolledBackend } from './backend-list';
import type { ScrapeJobData } from './scrape-job';

/** The part of a BullMQ `Queue` this needs (tests can pass a fake). */
export interface SchedulerQueue {
  /** The scheduler's next job (BullMQ's `Job`: its `delay` is how far ahead it is planned). */
  upsertJobScheduler(
    id: string,
    repeat: { every: number },
    template: { name: string; data: ScrapeJobData; opts: JobSchedulerTemplateOptions },
  ): Promise<{ readonly delay?: number } | undefined>;
  removeJobScheduler(id: string): Promise<boolean>;
  getJobSchedulers(start?: number, end?: number, asc?: boolean): Promise<JobSchedulerJson<ScrapeJobData>[]>;
  getJobState(jobId: string): Promise<JobState | 'unknown'>;
  add(name: string, data: ScrapeJobData, opts: JobsOptions): Promise<unknown>;
}

export interface RepairResult {
  /** Schedulers re-planned because the job of their planned slot was taken and nothing planned after it. */
  readonly replanned: readonly string[];
}

export interface ReconcileResult {
  readonly upserted: readonly string[];
  readonly removed: readonly string[];
}

export const SCRAPE_JOB_NAME = 'scrape';

/**
 * Scrape jobs are short and their history is worth nothing (the state in Redis is the record): removed
 * as soon as they end, never retried (the next scrape is one interval away).
 */
const JOB_OPTIONS: JobSchedulerTemplateOptions = { removeOnComplete: true, removeOnFail: true, attempts: 1 };

/**
 * One BullMQ job scheduler per backend (id = backend id, `every: intervalMs`), kept in line with the
 * backend list: created for a new backend, removed for one that left, re-created when its URL, engine
 * or interval changed, or re-planned when it is stuck.
 *
 * Why this gives one scrape per backend per interval with any number of poller replicas: a scheduler
 * lives in Redis, not in a replica, and it has exactly one pending job at a time, whose id is
 * `repeat:<backend id>:<planned ms>`. Whichever replica's worker takes that job plans the next one
 * (`updateJobScheduler`, only if the job is still the scheduler's current one), so a slot is taken once.
 * Upserting a scheduler that exists with the same interval keeps its planned time (the pending job is
 * replaced by one with the same id, or, if it is running, the next one is planned after it), so
 * replicas upserting at the same time do not multiply jobs. Still, a scheduler that is fine is left
 * alone: replicas only upsert what is missing or changed (`reconcile`) or stuck (`repairStuck`).
 *
 * Stuck: BullMQ plans a scheduler's next job in a second round trip after a worker took the current
 * one. A worker that dies between the two (SIGKILL, crash) leaves the scheduler with no future job, and
 * the job it took is locked until its lock expires (`jobLockMs`, seconds). `repairStuck`, run every
 * quarter interval by every replica, finds a planned time more than a quarter interval past whose job
 * is running (or gone), re-plans the scheduler, and scrapes the lost slot at once with a catch-up job
 * when the re-planned slot is more than half an interval away. The catch-up job's id is derived from
 * the slot and kept for a minute, so replicas that find the same stuck scheduler at once add it once.
 * The backend's longest gap is then about 1.5 intervals instead of the lock's seconds. (A job waiting
 * behind busy workers is late, not stuck: it is left alone.)
 */
export class ScrapeSchedules {
  private running: Promise<ReconcileResult> | null = null;
  private queued: Promise<ReconcileResult> | null = null;
  private latest: readonly PolledBackend[] = [];

  constructor(
    private readonly options: {
      readonly queue: SchedulerQueue;
      readonly intervalMs: number;
      readonly nowMs: () => number;
      readonly logger?: FastifyBaseLogger | undefined;
      /** Redis is down or just came back (RedisReachability.inOutage): a lost job is the outage's doing. */
      readonly inOutage?: () => boolean;
    },
  ) {}

  /**
   * Brings the schedulers in line with `backends`. One pass runs at a time; calls made meanwhile share
   * one more pass, with the latest list.
   */
  reconcile(backends: readonly PolledBackend[]): Promise<ReconcileResult> {
    this.latest = backends;
    this.queued ??= (this.running ?? Promise.resolve())
      .catch(() => undefined)
      .then(() => {
        this.queued = null;
        this.running = this.reconcileOnce(this.latest).finally(() => {
          this.running = null;
        });
        return this.running;
      });
    return this.queued;
  }

  /** Waits for the passes under way or queued (shutdown). */
  async settled(): Promise<void> {
    await this.queued?.catch(() => undefined);
    await this.running?.catch(() => undefined);
  }

  /**
   * Re-plans the schedulers (of `backends`) that a dead worker left without a next job, and scrapes
   * their lost slot now. See the class comment. Runs beside `reconcile`, never blocked by it.
   */
  async repairStuck(backends: readonly PolledBackend[]): Promise<RepairResult> {
    const { queue, intervalMs } = this.options;
    const lateBeforeMs = this.options.nowMs() - stuckCheckMs(intervalMs);
    const wanted = new Map(backends.map((backend) => [backend.id, backend]));
    const replanned: string[] = [];
    for (const scheduler of await queue.getJobSchedulers(0, -1, true)) {
      const backend = wanted.get(scheduler.key);
      const slotMs = scheduler.next;
      if (backend === undefined || slotMs === undefined || slotMs >= lateBeforeMs) continue;
      // `repeat:<id>:<ms>` is the id BullMQ gives a scheduler's job. Waiting or delayed: late behind
      // busy workers, it will run. Active with no next job planned, or gone: its worker died.
      const state = await queue.getJobState(`repeat:${scheduler.key}:${slotMs}`);
      if (state !== 'active' && state !== 'unknown') continue;
      const data = jobDataOf(backend);
      const next = await queue.upsertJobScheduler(
        backend.id,
        { every: intervalMs },
        { name: SCRAPE_JOB_NAME, data, opts: JOB_OPTIONS },
      );
      // The re-planned slot comes an interval after the lost one, or (found late) the next aligned one.
      // Only when it is more than half an interval away is the lost slot worth a scrape of its own.
      const catchUp = (next?.delay ?? intervalMs) > intervalMs / 2;
      if (catchUp)
        await queue.add(SCRAPE_JOB_NAME, data, {
          jobId: catchUpJobId(backend.id, slotMs),
          attempts: 1,
          removeOnComplete: { age: 60 },
          removeOnFail: { age: 60 },
        });
      replanned.push(backend.id);
      const fields = { backend: backend.id, plannedMs: slotMs, jobState: state, catchUp };
      // A restarted Redis that lost the queue's keys loses its jobs too: expected then, and said once by reachability.
      if (this.options.inOutage?.() === true)
        this.options.logger?.info(fields, 'scrape scheduler lost its next job in the outage: re-planned');
      else this.options.logger?.warn(fields, 'scrape scheduler lost its next job (a poller died): re-planned');
    }
    return { replanned };
  }

  private async reconcileOnce(backends: readonly PolledBackend[]): Promise<ReconcileResult> {
    const { queue, intervalMs } = this.options;
    const existing = new Map(
      (await queue.getJobSchedulers(0, -1, true)).map((scheduler) => [scheduler.key, scheduler]),
    );
    const wanted = new Set(backends.map((backend) => backend.id));
    const upserted: string[] = [];
    const removed: string[] = [];
    for (const backend of backends) {
      const data = jobDataOf(backend);
      const scheduler = existing.get(backend.id);
      if (scheduler && scheduler.every === intervalMs && sameData(scheduler.template?.data, data)) continue;
      await queue.upsertJobScheduler(
        backend.id,
        { every: intervalMs },
        { name: SCRAPE_JOB_NAME, data, opts: JOB_OPTIONS },
      );
      upserted.push(backend.id);
    }
    for (const id of existing.keys()) {
      if (wanted.has(id)) continue;
      await queue.removeJobScheduler(id);
      removed.push(id);
    }
    if (upserted.length > 0 || removed.length > 0)
      this.options.logger?.info({ upserted, removed }, 'scrape schedulers updated');
    return { upserted, removed };
  }
}

/** How often `repairStuck` should run, and how late a planned slot must be to count: a quarter interval. */
export function stuckCheckMs(intervalMs: number): number {
  return Math.max(25, Math.round(intervalMs / 4));
}

/**
 * The id of the catch-up scrape of one backend's lost slot. BullMQ rejects custom ids with colons
 * (other than its own three-part form) and backend ids are `host:port`, hence base64url.
 */
export function catchUpJobId(backendId: string, slotMs: number): string {
  return `catchup-${Buffer.from(backendId).toString('base64url')}-${slotMs}`;
}

function jobDataOf(backend: PolledBackend): ScrapeJobData {
  return { backendId: backend.id, url: backend.url, engine: backend.engine };
}

function sameData(stored: ScrapeJobData | undefined, wanted: ScrapeJobData): boolean {
  return (
    stored !== undefined &&
    stored.backendId === wanted.backendId &&
    stored.url === wanted.url &&
    (stored.engine ?? null) === wanted.engine
  );
}
