import { describe, expect, it } from 'vitest';
import { HeldLeases, type ReleasableLease } from './held-leases';

/** A lease whose release call to the state store takes `releaseMs`. */
function leaseIn(book: HeldLeases, releaseMs: number): ReleasableLease & { releases: number } {
  const lease = {
    releases: 0,
    release() {
      lease.releases += 1;
      if (lease.releases > 1) return;
      book.released(lease, new Promise((resolve) => setTimeout(resolve, releaseMs)));
    },
  };
  book.add(lease);
  return lease;
}

describe('HeldLeases', () => {
  it('releases what is still held, once each', async () => {
    const book = new HeldLeases();
    const done = leaseIn(book, 0);
    const left = [leaseIn(book, 0), leaseIn(book, 0)];
    done.release();
    expect(book.size).toBe(2);
    expect(book.releaseAll()).toBe(2);
    expect(book.size).toBe(0);
    expect(left.map((lease) => lease.releases)).toEqual([1, 1]);
    expect(done.releases).toBe(1);
    expect(await book.settled(1_000)).toBe(true);
  });

  it('waits for the release calls under way, within its timeout', async () => {
    const book = new HeldLeases();
    leaseIn(book, 30).release();
    expect(await book.settled(2_000)).toBe(true);
    leaseIn(book, 5_000).release();
    expect(await book.settled(20)).toBe(false);
  });

  it('does not count a failed release call as pending forever', async () => {
    const book = new HeldLeases();
    const lease = { release: () => book.released(lease, Promise.reject(new Error('Redis away'))) };
    book.add(lease);
    lease.release();
    expect(await book.settled(1_000)).toBe(true);
  });
});
