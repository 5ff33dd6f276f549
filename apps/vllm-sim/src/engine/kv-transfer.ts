import type { KvBlock } from './block-pool';
import { Histogram } from './histogram';

/**
 * Prefill/decode disaggregation inside one simulated engine (vLLM's NixlConnector, README "Prefill/decode"):
 * the link a decode instance pulls remote KV over, and the blocks a prefill instance holds for the decode
 * side until it has read them or their lease ran out.
 *
 * Times are simulated ms; sizes bytes.
 */

/** Bucket bounds of the NIXL histograms (one observation per pull): ms-scale RDMA reads to multi-second pulls. */
export const KV_TRANSFER_BUCKETS = {
  seconds: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  bytes: [2 ** 16, 2 ** 20, 2 ** 22, 2 ** 24, 2 ** 26, 2 ** 28, 2 ** 30, 2 ** 32],
} as const;

export interface KvTransferLinkOptions {
  /** KV bytes of one token on this model (2 × layers × KV heads × head dim × dtype bytes). */
  readonly bytesPerToken: number;
  /** Link bandwidth, bytes per simulated ms (1 GB/s = 1e6 bytes/ms). */
  readonly bytesPerMs: number;
  /** Fixed cost of one transfer (handshake, descriptor posting), ms. */
  readonly setupMs: number;
}

/**
 * The decode side's link: one pull at a time, first come first served, so concurrent pulls queue behind each
 * other as they do on one NIC. A pull of n tokens takes setupMs + n × bytesPerToken ÷ bytesPerMs.
 */
export class KvTransferLink {
  #freeAtMs = 0;
  readonly transferSeconds = new Histogram(KV_TRANSFER_BUCKETS.seconds);
  readonly transferBytes = new Histogram(KV_TRANSFER_BUCKETS.bytes);
  /**
   * vLLM's `nixl_num_failed_transfers`: always 0 here, since a sim's pull does not fail (the decode side does not ask
   * whether the prefill side still holds the blocks; a lease that ran out shows as `nixl_num_kv_expired_reqs`).
   */
  readonly failedTransfers = 0;

  constructor(readonly options: KvTransferLinkOptions) {}

  /** Starts a pull of `tokens` tokens no earlier than `startMs`; returns when it completes (simulated ms). */
  pull(tokens: number, startMs: number): number {
    const bytes = tokens * this.options.bytesPerToken;
    const begin = Math.max(startMs, this.#freeAtMs);
    const end = begin + this.options.setupMs + bytes / this.options.bytesPerMs;
    this.#freeAtMs = end;
    this.transferSeconds.observe((end - begin) / 1000);
    this.transferBytes.observe(bytes);
    return end;
  }
}

interface Hold {
  readonly blocks: readonly KvBlock[];
  readonly expiresAtMs: number;
}

/**
 * The prefill side: a finished request whose KV a decode instance will pull keeps its blocks allocated
 * (referenced, so neither freed nor evicted) until the decode side says it has read them, or until the lease
 * (`kv_lease_duration`, 30 s by default in vLLM's NIXL lease design) runs out: a decode side that died frees
 * them that late, and they count as expired (`nixl_kv_expired_reqs`).
 */
export class KvHolds {
  readonly #holds = new Map<string, Hold>();
  expiredRequests = 0;

  constructor(
    private readonly leaseMs: number,
    private readonly release: (blocks: readonly KvBlock[]) => void,
  ) {}

  get count(): number {
    return this.#holds.size;
  }

  /** The ids of the blocks held for `requestId` (what the decode side pulls), or null if none are. */
  blockIds(requestId: string): number[] | null {
    return this.#holds.get(requestId)?.blocks.map((block) => block.id) ?? null;
  }

  hold(requestId: string, blocks: readonly KvBlock[], nowMs: number): number {
    const expiresAtMs = nowMs + this.leaseMs;
    this.#holds.set(requestId, { blocks, expiresAtMs });
    return expiresAtMs;
  }

  /** The decode side read them: freed (they stay in the prefix cache, evictable). False if none were held. */
  done(requestId: string): boolean {
    const hold = this.#holds.get(requestId);
    if (hold === undefined) return false;
    this.#holds.delete(requestId);
    this.release(hold.blocks);
    return true;
  }

  /** When the next lease runs out (simulated ms), or null when nothing is held. */
  nextExpiryMs(): number | null {
    let earliest: number | null = null;
    for (const hold of this.#holds.values())
      if (earliest === null || hold.expiresAtMs < earliest) earliest = hold.expiresAtMs;
    return earliest;
  }

  /** Frees every hold whose lease ran out by `nowMs`. */
  expire(nowMs: number): void {
    for (const [requestId, hold] of this.#holds) {
      if (hold.expiresAtMs > nowMs) continue;
      this.#holds.delete(requestId);
      this.release(hold.blocks);
      this.expiredRequests++;
    }
  }
}
