import type { Ticket } from './route';

/**
 * Stage 6 of the request path, **release**: the try's lease goes back, exactly once, on whichever path
 * ended it (response end, upstream error, client abort, timeout, retry elsewhere). The shutdown's
 * deadline releases whatever a request left (HeldLeases). Idempotent, like the lease itself.
 */
export function release(ticket: Ticket): void {
  ticket.lease.release();
}
