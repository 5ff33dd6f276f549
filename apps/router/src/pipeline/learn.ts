import { usageFromTail } from '@kvroute/protocols';
import { checkPrediction } from '@kvroute/routing';
import type { ResponseTail } from '../proxy/response-tail';
import type { RouterMetrics } from '../router-metrics';
import type { Ticket } from './route';

/**
 * Stage 5 of the request path, **learn**: what a response tells the router about its backend.
 * - The first output: the request's time to first token, the end of its prefill (it leaves the
 *   backend's backlog), and, for policies that record ownership at first output, that the backend now
 *   holds the request's prefix (the blocks `decide` handed to the lease).
 * - The end of a successful response: its usage (`usage.prompt_tokens_details.cached_tokens`) against
 *   the prefix the decision believed the backend held: the prediction accuracy metrics
 *   (`kvroute_router_prefix_*`). Correcting the index from it comes next (issue 13).
 */
export interface Learner {
  /** The ticket's first output reached the client. Called once per try at most. */
  firstOutput(ticket: Ticket, arrivedAtMs: number): void;
  /** The ticket's try ended; `tail` holds a successful response's last bytes (null otherwise). */
  responseEnded(ticket: Ticket, tail: ResponseTail | null): void;
}

export function createLearner(metrics: RouterMetrics): Learner {
  /**
   * Backends seen reporting cached tokens. vLLM leaves `prompt_tokens_details` out when it found
   * nothing in its cache (`if enable_prompt_tokens_details and num_cached_tokens:` in its serving code),
   * so an absent figure means 0 from a backend that has reported one before, and "does not say" from
   * one that never has (llama.cpp, SGLang or vLLM without the flag).
   */
  const reporting = new Set<string>();
  return {
    firstOutput(ticket, arrivedAtMs) {
      ticket.lease.markPrefillDone();
      metrics.recordTtft(ticket.backend.id, (performance.now() - arrivedAtMs) / 1000);
    },
    responseEnded(ticket, tail) {
      if (tail === null) return;
      const usage = usageFromTail(tail.text());
      const backendId = ticket.backend.id;
      if (usage?.cachedTokens != null) reporting.add(backendId);
      metrics.recordFeedbackMode(backendId, reporting.has(backendId));
      const observed = usage !== null && usage.cachedTokens === null && reporting.has(backendId) ? { ...usage, cachedTokens: 0 } : usage;
      metrics.recordPrediction(backendId, checkPrediction(ticket.prediction, observed));
    },
  };
}
