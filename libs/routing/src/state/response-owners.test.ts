import { describe, expect, it } from 'vitest';
import { InMemoryResponseOwners } from './response-owners';

describe('InMemoryResponseOwners', () => {
  it('finds an owner in its own scope only, until its TTL', async () => {
    let now = 1_000;
    const owners = new InMemoryResponseOwners({ ttlMs: 500, maxEntries: 10, nowMs: () => now });
    await owners.remember('tenant-a', 'resp_1', 'b1');
    expect(await owners.ownerOf('tenant-a', 'resp_1')).toBe('b1');
    expect(await owners.ownerOf('tenant-b', 'resp_1')).toBeNull();
    expect(await owners.ownerOf('', 'resp_1')).toBeNull();
    now += 499;
    expect(await owners.ownerOf('tenant-a', 'resp_1')).toBe('b1');
    now += 1;
    expect(await owners.ownerOf('tenant-a', 'resp_1')).toBeNull();
    expect(owners.size).toBe(0);
  });

  it('keeps at most maxEntries, dropping the least recently remembered', async () => {
    const owners = new InMemoryResponseOwners({ ttlMs: 60_000, maxEntries: 2, nowMs: () => 0 });
    await owners.remember('', 'resp_1', 'b1');
    await owners.remember('', 'resp_2', 'b2');
    await owners.remember('', 'resp_1', 'b1');
    await owners.remember('', 'resp_3', 'b3');
    expect(owners.size).toBe(2);
    expect(await owners.ownerOf('', 'resp_2')).toBeNull();
    expect(await owners.ownerOf('', 'resp_1')).toBe('b1');
    expect(await owners.ownerOf('', 'resp_3')).toBe('b3');
  });

  it('forgets', async () => {
    const owners = new InMemoryResponseOwners({ ttlMs: 60_000, maxEntries: 2, nowMs: () => 0 });
    await owners.remember('s', 'resp_1', 'b1');
    await owners.forget('s', 'resp_1');
    expect(await owners.ownerOf('s', 'resp_1')).toBeNull();
  });
});
