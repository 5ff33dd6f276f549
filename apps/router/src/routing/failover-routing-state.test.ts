import {
  CACHE_AWARE_PARAMS,
  createCacheAwarePolicy,
  decide,
  evaluateCost,
  InMemoryRoutingState,
  resolveParams,
  type AtomicRouteInput,
  type DecideInput,
  type RoutingStateStore,
} from '@kvroute/routing';
import { createServer, connect, type AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { FailoverRoutingState } from './failover-routing-state';

/** A shared store that can be switched to fail fast or to hang, wrapping a working in-memory one. */
function flakyStore(nowMs: () => number) {
  const inner = new InMemoryRoutingState({ maxBlocksPerBackend: 1000, blockIdleTtlMs: 0, nowMs });
  let mode: 'up' | 'down' | 'slow' = 'up';
  const gate = <T>(call: () => Promise<T>): Promise<T> =>
    mode === 'up'
      ? call()
      : mode === 'down'
        ? Promise.reject(new Error('connection refused'))
        : new Promise<T>(() => undefined);
  const store: RoutingStateStore = {
    snapshot: (...args) => gate(() => inner.snapshot(...args)),
    reserve: (...args) => gate(() => inner.reserve(...args)),
    prefillDone: (...args) => gate(() => inner.prefillDone(...args)),
    clearBacklog: (...args) => gate(() => inner.clearBacklog(...args)),
    renew: (...args) => gate(() => inner.renew(...args)),
    release: (...args) => gate(() => inner.release(...args)),
    forgetBackend: (...args) => gate(() => inner.forgetBackend(...args)),
    learn: (...args) => gate(() => inner.learn(...args)),
    inflightCounts: () => inner.inflightCounts(),
  };
  return { store, inner, setMode: (next: typeof mode) => (mode = next) };
}

/** One cacheaware decision over backends a and b for a two-block request, taking lease `leaseId`. */
function cacheAwareInput(leaseId: string): DecideInput {
  return {
    pool: 'm',
    request: {
      model: 'm',
      blockHashes: [1, 2],
      blockSizeBytes: 256,
      textBytes: 600,
      contextBlocks: 0,
      headHash: 1,
      sessionKey: null,
    },
    backends: [
      { id: 'a', weight: 1 },
      { id: 'b', weight: 1 },
    ],
    policy: createCacheAwarePolicy(),
    context: { nowMs: 0, random: () => 0.5 },
    leaseId,
  };
}

function setup() {
  let now = 0;
  const nowMs = () => now;
  const shared = flakyStore(nowMs);
  const local = new InMemoryRoutingState({ maxBlocksPerBackend: 1000, blockIdleTtlMs: 0, nowMs });
  const changes: boolean[] = [];
  const state = new FailoverRoutingState(shared.store, local, {
    timeoutMs: 20,
    retryAfterMs: 100,
    maxRetryAfterMs: 1000,
    nowMs,
    onDegradedChange: (degraded) => changes.push(degraded),
  });
  return { state, shared, local, changes, advance: (ms: number) => (now += ms) };
}

describe('FailoverRoutingState', () => {
  it('uses the shared store while it answers', async () => {
    const { state, shared, local } = setup();
    await state.reserve('m', 'a', 'l1', [1, 2], 100);
    expect(shared.inner.inflightCounts().get('a')).toBe(1);
    expect(local.inflightCounts().get('a') ?? 0).toBe(0);
    expect(state.degraded).toBe(false);
  });

  it('goes degraded on a failure, serves from local state, and comes back after the backoff', async () => {
    const { state, shared, local, changes, advance } = setup();
    shared.setMode('down');
    const snapshot = await state.snapshot('m', ['a'], [1]);
    expect(snapshot.inflight.get('a')).toBe(0);
    expect(state.degraded).toBe(true);
    await state.reserve('m', 'a', 'l1', [1], 10);
    expect(local.inflightCounts().get('a')).toBe(1);
    shared.setMode('up');
    await state.snapshot('m', ['a'], [1]);
    expect(state.degraded).toBe(true); // still backing off
    advance(150);
    await state.snapshot('m', ['a'], [1]);
    expect(state.degraded).toBe(false);
    expect(changes).toEqual([true, false]);
    // The lease taken during the outage is released where it lives.
    await state.release('m', 'a', 'l1');
    expect(local.inflightCounts().get('a')).toBe(0);
  });

  it('doubles the backoff once per failed retry window, however many concurrent calls fail in it', async () => {
    const { state, shared, advance } = setup();
    shared.setMode('down');
    await state.snapshot('m', ['a'], [1]); // degraded, next try after 100 ms
    advance(150);
    // The window is open: every request in flight asks the shared store, and all of them fail.
    await Promise.all(Array.from({ length: 6 }, () => state.snapshot('m', ['a'], [1])));
    expect(state.degraded).toBe(true);
    shared.setMode('up');
    // One doubling (200 ms), not six (capped at 1000 ms): back on shared state 250 ms later.
    advance(250);
    await state.snapshot('m', ['a'], [1]);
    expect(state.degraded).toBe(false);
  });

  it('decides on local state when the shared store fails, and releases that lease locally', async () => {
    const { state, shared, local } = setup();
    const first = await decide(state, cacheAwareInput('l1'));
    expect(first.decision.kind).toBe('routed');
    expect([...shared.inner.inflightCounts().values()]).toEqual([1]);
    shared.setMode('down');
    const second = await decide(state, cacheAwareInput('l2'));
    expect(state.degraded).toBe(true);
    expect(second.decision.kind).toBe('routed');
    expect([...local.inflightCounts().values()].reduce((sum, count) => sum + count, 0)).toBe(1);
    if (second.decision.kind === 'routed') await state.release('m', second.decision.backendId, 'l2');
    expect([...local.inflightCounts().values()].reduce((sum, count) => sum + count, 0)).toBe(0);
  });

  it('treats a call slower than the deadline as a failure', async () => {
    const { state, shared } = setup();
    shared.setMode('slow');
    const started = Date.now();
    await state.snapshot('m', ['a'], []);
    expect(Date.now() - started).toBeLessThan(500);
    expect(state.degraded).toBe(true);
  });

  it('routes atomically on the shared store while it answers, and on a failure snapshots and reserves on local state only', async () => {
    let now = 0;
    const nowMs = () => now;
    const shared = flakyStore(nowMs);
    const calls: string[] = [];
    // The shared store evaluates the cost rule itself, as Redis does (route.lua); its own reads are not store calls.
    const atomicShared: RoutingStateStore = {
      ...shared.store,
      routeAtomically: async (input: AtomicRouteInput) => {
        calls.push('shared.routeAtomically');
        const snapshot = await shared.store.snapshot(
          input.pool,
          input.backends.map((backend) => backend.id),
          input.blockHashes,
        );
        const candidates = input.backends.map((backend) => ({
          backend,
          inflight: snapshot.inflight.get(backend.id) ?? 0,
          matchBlocks: snapshot.matchBlocks.get(backend.id) ?? 0,
          pendingPrefillTokens: snapshot.pendingPrefillTokens.get(backend.id) ?? 0,
          engine: null,
        }));
        if (input.rule.name !== 'cost') return null;
        // cacheAwareInput's policy: cacheaware with its defaults.
        const outcome = evaluateCost(input.request, candidates, resolveParams(CACHE_AWARE_PARAMS, {}));
        await shared.inner.reserve(input.pool, candidates[outcome.chosen]?.backend.id ?? '', input.leaseId, [], 0);
        return outcome;
      },
      snapshot: (...args) => (calls.push('shared.snapshot'), shared.store.snapshot(...args)),
      reserve: (...args) => (calls.push('shared.reserve'), shared.store.reserve(...args)),
    };
    const local = new InMemoryRoutingState({ maxBlocksPerBackend: 1000, blockIdleTtlMs: 0, nowMs });
    const localCalls: RoutingStateStore = {
      snapshot: (...args) => (calls.push('local.snapshot'), local.snapshot(...args)),
      reserve: (...args) => (calls.push('local.reserve'), local.reserve(...args)),
      renew: (...args) => local.renew(...args),
      prefillDone: (...args) => local.prefillDone(...args),
      clearBacklog: (...args) => local.clearBacklog(...args),
      release: (...args) => local.release(...args),
      forgetBackend: (...args) => local.forgetBackend(...args),
      learn: (...args) => local.learn(...args),
      inflightCounts: () => local.inflightCounts(),
    };
    const state = new FailoverRoutingState(atomicShared, localCalls, {
      timeoutMs: 20,
      retryAfterMs: 100,
      maxRetryAfterMs: 1000,
      nowMs,
      onDegradedChange: () => undefined,
    });

    expect((await decide(state, cacheAwareInput('l1'))).decision.kind).toBe('routed');
    expect(calls.splice(0)).toEqual(['shared.routeAtomically']);

    shared.setMode('down');
    const failedOver = await decide(state, cacheAwareInput('l2'));
    expect(failedOver.decision.kind).toBe('routed');
    expect(state.degraded).toBe(true);
    expect(calls.splice(0)).toEqual(['shared.routeAtomically', 'local.snapshot', 'local.reserve']);

    // Degraded: the shared store is not asked at all until the backoff has passed.
    await decide(state, cacheAwareInput('l3'));
    expect(calls.splice(0)).toEqual(['local.snapshot', 'local.reserve']);
    shared.setMode('up');
    now += 150;
    await decide(state, cacheAwareInput('l4'));
    expect(state.degraded).toBe(false);
    expect(calls.splice(0)).toEqual(['shared.routeAtomically']);
  });

  it('refuses a backoff below 1 ms (it keeps the snapshot after a failed atomic call local)', () => {
    const nowMs = () => 0;
    const store = new InMemoryRoutingState({ maxBlocksPerBackend: 10, blockIdleTtlMs: 0, nowMs });
    expect(
      () =>
        new FailoverRoutingState(store, store, {
          timeoutMs: 20,
          retryAfterMs: 0,
          maxRetryAfterMs: 1000,
          nowMs,
          onDegradedChange: () => undefined,
        }),
    ).toThrow(RangeError);
  });

  it('does not count as slow a reply that waited while this process was busy past the deadline', async () => {
    const { state, shared } = setup();
    // A reply that comes over a socket, as Redis's does: read in the poll phase of the event loop. It is
    // already in the kernel's buffer (sent at connect, the client paused), so one poll phase reads it.
    const server = createServer((socket) => socket.end('y'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
    client.pause();
    await new Promise((resolve) => client.once('connect', resolve));
    await new Promise((resolve) => setTimeout(resolve, 20));
    try {
      const fastReserve = shared.store.reserve;
      shared.store.reserve = (...args) =>
        new Promise<boolean>((resolve) => {
          client.once('data', () => void fastReserve(...args).then(resolve));
          client.resume();
        });
      // Called from the loop's check phase, so that the next phase to run is the timers'.
      await new Promise((resolve) => setImmediate(resolve));
      const reserving = state.reserve('m', 'a', 'l1', [1], 10);
      // Busy past the 20 ms deadline: when the loop runs again, the deadline's timer is due before
      // the socket's reply is read.
      const busyUntil = performance.now() + 60;
      while (performance.now() < busyUntil);
      expect(await reserving).toBe(true);
      expect(state.degraded).toBe(false);
      expect(shared.inner.inflightCounts().get('a')).toBe(1);
    } finally {
      client.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('gives back a lease the shared store took after the deadline had passed', async () => {
    const { state, shared, local } = setup();
    let answer: (() => void) | undefined;
    const slowReserve = shared.store.reserve;
    shared.store.reserve = (...args) =>
      new Promise<boolean>((resolve) => {
        answer = () => void slowReserve(...args).then(resolve);
      });
    expect(await state.reserve('m', 'a', 'l1', [1], 10)).toBe(true); // on the local state, degraded
    expect(state.degraded).toBe(true);
    expect(local.inflightCounts().get('a')).toBe(1);
    answer?.(); // Redis took the lease after all
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(shared.inner.inflightCounts().get('a') ?? 0).toBe(0);
  });
});
