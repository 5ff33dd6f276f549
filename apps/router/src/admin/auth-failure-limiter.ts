import { isIP } from 'node:net';

/**
 * Failed admin-token attempts per peer: after `maxFailures` wrong tokens within `windowMs` of the peer's
 * first failure, every request from that peer (right token or not) is refused with 429 until the window
 * ends, so a token cannot be guessed at line rate. Memory is bounded: at most `maxPeers` peers are tracked;
 * beyond, expired entries go first, then the oldest peers not blocked yet, and only when every tracked
 * peer is blocked the oldest blocked one (a Map keeps insertion order). A peer is its IPv4 address or
 * its IPv6 /64 (one host usually holds a whole /64, so counting single IPv6 addresses would let it
 * rotate past the limit and evict the blocked). The clock is injected.
 */
export interface AuthFailureLimiterOptions {
  readonly maxFailures: number;
  readonly windowMs: number;
  readonly maxPeers: number;
  readonly nowMs: () => number;
}

interface PeerFailures {
  count: number;
  /** When this peer's window ends, ms on the injected clock. */
  windowEndsAtMs: number;
}

export class AuthFailureLimiter {
  private readonly peers = new Map<string, PeerFailures>();

  constructor(private readonly options: AuthFailureLimiterOptions) {}

  /** Seconds until `peer` may try again (≥ 1), or null when it is not blocked. */
  retryAfterSeconds(peer: string): number | null {
    const entry = this.current(peer);
    if (entry === null || entry.count < this.options.maxFailures) return null;
    return Math.max(1, Math.ceil((entry.windowEndsAtMs - this.options.nowMs()) / 1000));
  }

  /** Counts one wrong token from `peer`; returns its failures in the current window, this one included. */
  recordFailure(peer: string): number {
    const entry = this.current(peer);
    if (entry !== null) {
      entry.count += 1;
      return entry.count;
    }
    this.makeRoom();
    this.peers.set(peer, { count: 1, windowEndsAtMs: this.options.nowMs() + this.options.windowMs });
    return 1;
  }

  /** Peers tracked now (bounded by `maxPeers`). */
  get size(): number {
    return this.peers.size;
  }

  private current(peer: string): PeerFailures | null {
    const entry = this.peers.get(peer);
    if (entry === undefined) return null;
    if (entry.windowEndsAtMs <= this.options.nowMs()) {
      this.peers.delete(peer);
      return null;
    }
    return entry;
  }

  private makeRoom(): void {
    if (this.peers.size < this.options.maxPeers) return;
    const now = this.options.nowMs();
    for (const [peer, entry] of this.peers) if (entry.windowEndsAtMs <= now) this.peers.delete(peer);
    for (const [peer, entry] of this.peers) {
      if (this.peers.size < this.options.maxPeers) return;
      if (entry.count < this.options.maxFailures) this.peers.delete(peer);
    }
    while (this.peers.size >= this.options.maxPeers) {
      const oldest = this.peers.keys().next().value as string;
      this.peers.delete(oldest);
    }
  }
}

/**
 * The key a socket address is limited under: an IPv4 address as it is (also when IPv4-mapped), an
 * IPv6 address as its /64 (`2001:db8:1:2::/64`), anything else as it is.
 */
export function limitedPeerOf(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1] as string;
  if (isIP(address) !== 6) return address;
  const [head = '', tail] = address.toLowerCase().split('%')[0]?.split('::') ?? [];
  const front = head === '' ? [] : head.split(':');
  const back = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups =
    tail === undefined ? front : [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back];
  return `${groups
    .slice(0, 4)
    .map((group) => group.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
