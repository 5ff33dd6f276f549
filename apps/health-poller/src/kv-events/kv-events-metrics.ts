import type * as Zeromq from 'zeromq';

/** Everything counted about the event streams (PollerMetrics implements it). */
export type KvEventsProblem =
  | 'malformed_batch'
  | 'oversized_batch'
  | 'malformed_event'
  | 'unknown_event'
  | 'ignored_event'
  | 'queue_overflow'
  | 'unknown_hash'
  | 'orphan_block'
  | 'sequence_gap'
  | 'sequence_backwards'
  | 'replay_short'
  | 'replay_timeout'
  | 'apply_failed'
  | 'subscribe_failed'
  | 'lease_expired';

export interface KvEventsMetricsSink {
  /** A batch taken off a stream: applied, used to warm the names only, skipped as a duplicate, or dropped (queue full). */
  recordKvBatch(outcome: 'applied' | 'named_only' | 'duplicate' | 'dropped'): void;
  recordKvProblem(problem: KvEventsProblem, count?: number): void;
  recordKvBlocks(op: 'stored' | 'removed', count: number): void;
  /** The rank's ownership forgotten at once: AllBlocksCleared, publisher restart, a gap no replay could fill. */
  recordKvResync(reason: 'cleared' | 'restart' | 'gap'): void;
}

/** The zeromq package, loaded once the first stream is held (its native addon is outside the app bundles). */
export type ZeromqModule = typeof Zeromq;
