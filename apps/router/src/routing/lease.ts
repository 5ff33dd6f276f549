import type { BackendId, BlockHash, RoutingStateStore } from '@kvroute/routing';
import type { HeldLeases } from './held-leases';
import { NODE_TIMERS, type OneShotTimers } from '../one-shot-timers';

export interface LeaseOptions {
  readonly state: RoutingStateStore;
  readonly pool: string;
  readonly backendId: BackendId;
  /** Made by the router for this one try (never the client's request id: clients choose theirs). */
  readonly leaseId: string;
  /** Told about a renewal, prefill-done or release call that failed. */
  readonly onError: (error: unknown) => void;
  /** Where the lease is listed while held, so that shutdown can release what is left and wait for the releases. */
  readonly book?: HeldLeases | undefined;
  /** Blocks the backend is recorded as holding when the first output arrives (`DecideResult.blocksAtFirstOutput`). */
  readonly blocksAtFirstOutput: readonly BlockHash[];
  /**
   * A stream's prefill-done call waits this long after its first output (0 = sent at once), and rides
   * on the release instead if the stream ends first: one shared-state round trip less for short
   * streams. Meanwhile the lease still counts its prefill tokens and its prefix is not recorded yet.
   */
  readonly prefillDoneDelayMs?: number;
  /** Timers (tests give their own); default Node's, unref'd. */
  readonly timers?: OneShotTimers;
}

const NO_BLOCKS: readonly BlockHash[] = [];

/**
 * An in-flight lease on one backend: released exactly once, on whichever path ends the request
 * (response end, upstream error, client abort, timeout, retry elsewhere, shutdown deadline).
 */
export class Lease {
  readonly pool: string;
  readonly backendId: BackendId;
  readonly leaseId: string;
  private released = false;
  private prefillFinished = false;
  /**
   * The release records `blocksAtFirstOutput` (markPrefillDone): the first output came with the end, or
   * a stream's deferred prefill-done has not gone out yet (it merges into the release).
   */
  private ownershipAtRelease = false;
  private renewTimer: NodeJS.Timeout | null = null;
  /** A stream's deferred prefill-done (prefillDoneDelayMs), until it is sent or the release takes it over. */
  private prefillDoneTimer: unknown = null;
  /** A non-streaming request's estimated end of prefill (clearBacklogAfter), until it fires or is overtaken. */
  private backlogTimer: unknown = null;

  private readonly timers: OneShotTimers;

  constructor(private readonly options: LeaseOptions) {
    this.timers = options.timers ?? NODE_TIMERS;
    this.pool = options.pool;
    this.backendId = options.backendId;
    this.leaseId = options.leaseId;
    options.book?.add(this);
  }

  /** Keeps the lease alive while the request runs (every `intervalMs`, until release; 0 = never). */
  startRenewing(intervalMs: number): void {
    if (this.released || this.renewTimer || intervalMs <= 0) return;
    this.renewTimer = setInterval(() => {
      this.options.state.renew(this.pool, this.backendId, this.leaseId).catch(this.options.onError);
    }, intervalMs);
    this.renewTimer.unref();
  }

  /**
   * The first output arrived: this request's prefill leaves the backend's backlog, and its prefix is the
   * backend's (once). `withEnd`: it came with the response's end (a non-streaming response, whose
   * headers arrive once generation is done), so the release that follows at once does both in one call
   * instead of two; until then the lease still counts its prefill tokens. A stream's call waits
   * `prefillDoneDelayMs`, and merges into the release if the stream ends first.
   */
  markPrefillDone(withEnd = false): void {
    if (this.prefillFinished || this.released) return;
    this.prefillFinished = true;
    this.stopBacklogTimer();
    this.ownershipAtRelease = true;
    if (withEnd) return;
    const delayMs = this.options.prefillDoneDelayMs ?? 0;
    if (delayMs <= 0) {
      this.sendPrefillDone();
      return;
    }
    this.prefillDoneTimer = this.timers.set(() => {
      this.prefillDoneTimer = null;
      if (!this.released) this.sendPrefillDone();
    }, delayMs);
  }

  /**
   * A non-streaming request's prefill leaves the backend's backlog `afterMs` from now, an estimate: its
   * response's first byte is its end, which would count its whole generation as prefill still to come and
   * make every backend serving such requests look equally busy to the requests routed meanwhile. Only the
   * backlog: its prefix is recorded by the release, when the engine has surely computed it. Nothing is sent
   * if the first output or the release comes first.
   */
  clearBacklogAfter(afterMs: number): void {
    if (this.prefillFinished || this.released || this.backlogTimer !== null) return;
    this.backlogTimer = this.timers.set(() => {
      this.backlogTimer = null;
      if (this.prefillFinished || this.released) return;
      this.options.state.clearBacklog(this.pool, this.backendId, this.leaseId).catch(this.options.onError);
    }, afterMs);
  }

  private stopBacklogTimer(): void {
    if (this.backlogTimer === null) return;
    this.timers.clear(this.backlogTimer);
    this.backlogTimer = null;
  }

  private sendPrefillDone(): void {
    this.ownershipAtRelease = false;
    this.options.state
      .prefillDone(this.pool, this.backendId, this.leaseId, this.options.blocksAtFirstOutput)
      .catch(this.options.onError);
  }

  /** Idempotent. */
  release(): void {
    if (this.released) return;
    this.released = true;
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.stopBacklogTimer();
    if (this.prefillDoneTimer !== null) {
      this.timers.clear(this.prefillDoneTimer);
      this.prefillDoneTimer = null;
    }
    const heldBlocks = this.ownershipAtRelease ? this.options.blocksAtFirstOutput : NO_BLOCKS;
    const call = this.options.state
      .release(this.pool, this.backendId, this.leaseId, heldBlocks)
      .catch(this.options.onError);
    this.options.book?.released(this, call);
  }
}
