import { z } from 'zod';

/**
 * Flow control's options (issue 30; flow/flow-control.ts), spread into the router's config schema. Off
 * by default: turning it on makes a saturated pool queue in the router (and shed with 429) where today
 * the engines queue.
 */
export const FLOW_CONFIG_FIELDS = {
  flowControl: z
    .boolean()
    .default(false)
    .describe(
      'flow control: when every backend of a model is saturated, requests wait in the router (fair by ' +
        'tokens per tenant across replicas, priority classes first) and are shed with 429 when they cannot ' +
        'start in time',
    ),
  flowMaxInflightPerBackend: z.coerce
    .number()
    .int()
    .min(0)
    .default(0)
    .describe(
      "flow control: requests a backend runs at once before its pool counts as saturated (0 = judge by the engines' waiting and KV usage only)",
    ),
  flowSaturationWaiting: z.coerce
    .number()
    .positive()
    .default(5)
    .describe(
      'flow control: engine-reported waiting requests per backend at which it is saturated (a pool is ' +
        'saturated when its backends’ mean of max(waiting ÷ this, KV usage ÷ flowSaturationKvUsage) reaches ' +
        '1)',
    ),
  flowSaturationKvUsage: z.coerce
    .number()
    .positive()
    .max(1)
    .default(0.95)
    .describe('flow control: engine-reported KV-cache usage (0–1) at which a backend is saturated'),
  flowMaxQueueWaitMs: z.coerce
    .number()
    .int()
    .positive()
    .default(10_000)
    .describe(
      'flow control: the longest a request waits in the queue; one predicted to wait longer is shed at once (429 + Retry-After)',
    ),
  flowMaxQueuedRequests: z.coerce
    .number()
    .int()
    .positive()
    .default(1_000)
    .describe('flow control: requests waiting per model on one replica; beyond it 429'),
  flowMaxQueuedBytes: z.coerce
    .number()
    .int()
    .positive()
    .default(256 * 1024 * 1024)
    .describe('flow control: request bodies held by waiting requests per model on one replica, bytes; beyond it 429'),
  flowExpressShare: z.coerce
    .number()
    .min(0)
    .max(1)
    .default(0.25)
    .describe(
      'flow control: a tenant below its fair share of a saturated pool (by weight, among the tenants ' +
        'running there) is admitted at once, ahead of the queue, while the pool runs fewer than its capacity ' +
        '× (1 + this); 0 = fair queuing only (a light tenant then waits for a slot to free)',
    ),
  flowPollMs: z.coerce
    .number()
    .int()
    .min(1)
    .default(20)
    .describe(
      'flow control: how often a replica asks whether its first waiting request may go (besides whenever one of its requests ends)',
    ),
  maxInflightPerCaller: z.coerce
    .number()
    .int()
    .min(0)
    .default(0)
    .describe(
      'requests one caller (a tenant; a client address in open mode) may have in flight on one replica, ' +
        'taken before the body is read; beyond it 429. 0 = half of maxInflightRequests, so no caller alone ' +
        'fills the replica',
    ),
};

/** What flow control reads of the config, in its own units. */
export interface FlowSettings {
  readonly maxInflightPerBackend: number;
  /** Slots beyond the capacity open at once to a tenant below its fair share, as a fraction of it (0–1). */
  readonly expressShare: number;
  readonly saturationWaiting: number;
  readonly saturationKvUsage: number;
  readonly maxQueueWaitMs: number;
  readonly maxQueuedRequests: number;
  readonly maxQueuedBytes: number;
  readonly pollMs: number;
  /** How long an admitted request's slot lives unrenewed in the shared queue, ms. */
  readonly leaseTtlMs: number;
  /** After the shared queue failed, how long this replica queues on its own before trying it again, ms. */
  readonly sharedRetryMs: number;
}
