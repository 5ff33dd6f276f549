import type { JobSchedulerJson, JobSchedulerTemplateOptions } from 'bullmq';
import type { FastifyBaseLogger } from 'fastify';
import type { PolledBackend } from './backend-list';
import type { ScrapeJobData } from './scrape-job';

/** The part of a BullMQ `Queue` this needs (tests can pass a fake). */
export interface SchedulerQueue {
  upsertJobScheduler(id: string, repeat: { every: number }, template: { name: string; data: ScrapeJobData; opts: JobSchedulerTemplateOptions }): Promise<unknown>;
  removeJobScheduler(id: string): Promise<boolean>;
  getJobSchedulers(start?: number, end?: number, asc?: boolean): Promise<JobSchedulerJson<ScrapeJobData>[]>;
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
 * or interval changed, or when it is stuck.
 *
 * Why this gives one scrape per backend per interval with any number of poller replicas: a scheduler
 * lives in Redis, not in a replica, and it has exactly one pending job at a time, whose id is
 * `repeat:<backend id>:<planned ms>`. Whichever replica's worker takes that job plans the next one
 * (`updateJobScheduler`, only if the job is still the scheduler's current one), so a slot is taken once.
 * Upserting a scheduler that exists with the same interval keeps its planned time (the pending job is
 * replaced by one with the same id, or, if it is running, the next one is planned after it), so
 * replicas upserting at the same time do not multiply jobs. Still, a scheduler that is fine is left
 * alone: replicas only upsert what is missing, changed or stuck.
 *
 * Stuck: the planned time is more than two intervals past. A worker that died between taking a job and
 * planning the next (one round trip) leaves a scheduler with no future job; the stalled check would
 * bring that job back after the job lock expired, and this repairs it sooner (an upsert plans the next
 * aligned slot).
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

  private async reconcileOnce(backends: readonly PolledBackend[]): Promise<ReconcileResult> {
    const { queue, intervalMs } = this.options;
    const existing = new Map((await queue.getJobSchedulers(0, -1, true)).map((scheduler) => [scheduler.key, scheduler]));
    const wanted = new Set(backends.map((backend) => backend.id));
    const staleBeforeMs = this.options.nowMs() - 2 * intervalMs;
    const upserted: string[] = [];
    const removed: string[] = [];
    for (const backend of backends) {
      const data: ScrapeJobData = { backendId: backend.id, url: backend.url, engine: backend.engine };
      const scheduler = existing.get(backend.id);
      const stuck = scheduler?.next !== undefined && scheduler.next < staleBeforeMs;
      if (scheduler && scheduler.every === intervalMs && sameData(scheduler.template?.data, data) && !stuck) continue;
      await queue.upsertJobScheduler(backend.id, { every: intervalMs }, { name: SCRAPE_JOB_NAME, data, opts: JOB_OPTIONS });
      upserted.push(backend.id);
      if (stuck) this.options.logger?.warn({ backend: backend.id, plannedMs: scheduler?.next }, 'scrape scheduler was stuck: re-created');
    }
    for (const id of existing.keys()) {
      if (wanted.has(id)) continue;
      await queue.removeJobScheduler(id);
      removed.push(id);
    }
    if (upserted.length > 0 || removed.length > 0) this.options.logger?.info({ upserted, removed }, 'scrape schedulers updated');
    return { upserted, removed };
  }
}

function sameData(stored: ScrapeJobData | undefined, wanted: ScrapeJobData): boolean {
  return stored !== undefined && stored.backendId === wanted.backendId && stored.url === wanted.url && (stored.engine ?? null) === wanted.engine;
}
