import type { RouterMetrics } from '../router-metrics';
import type { Ticket } from './route';

/**
 * Stage 5 of the request path, **learn**: what a response tells the router about its backend. Today
 * that is the first output: the request's time to first token, the end of its prefill (it leaves the
 * backend's backlog), and, for policies that record ownership at first output, that the backend now
 * holds the request's prefix (the blocks `decide` handed to the lease). What the response's usage says
 * (cached tokens) comes here next.
 */
export interface Learner {
  /** The ticket's first output reached the client. Called once per try at most. */
  firstOutput(ticket: Ticket, arrivedAtMs: number): void;
}

export function createLearner(metrics: RouterMetrics): Learner {
  return {
    firstOutput(ticket, arrivedAtMs) {
      ticket.lease.markPrefillDone();
      metrics.recordTtft(ticket.backend.id, (performance.now() - arrivedAtMs) / 1000);
    },
  };
}
