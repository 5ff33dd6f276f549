import { settleLimits, type Admission, type LimitDeps } from './limit';
import type { Ticket } from './route';

/**
 * Stage 8 of the request path, **release**: what a request holds goes back, each thing exactly once.
 * - A try's lease (`releaseLease`), on whichever path ended the try (response end, upstream error,
 *   client abort, timeout, retry elsewhere). The shutdown's deadline releases whatever a request left
 *   (HeldLeases). Idempotent, like the lease itself.
 * - The request's limits (`releaseLimits`), once the request is over, whatever its tries: settled at
 *   what its usage says it used; at what was reserved when a try reached a backend but no usage came
 *   back (the engine may have generated it all); at nothing when no try reached a backend.
 */
export function releaseLease(ticket: Ticket): void {
  ticket.lease.release();
}

/**
 * `usedTokens`: prompt + completion tokens of the response's usage, −1 when no response carried usage;
 * `sent`: a try reached a backend.
 */
export function releaseLimits(deps: LimitDeps, admission: Admission, usedTokens: number, sent: boolean): void {
  settleLimits(deps, admission, usedTokens >= 0 ? usedTokens : sent ? null : 0);
}
