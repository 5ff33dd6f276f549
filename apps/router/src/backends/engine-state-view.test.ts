import type { BackendState } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from './circuit-breaker';
import type { Backend } from './backend-registry';
import { eligibleBackends } from './eligible-backends';
import { EngineStateView, type BackendStateSource } from './engine-state-view';

function aState(backendId: string, fields: Partial<BackendState> = {}): BackendState {
  return {
    backendId,
    engine: 'vllm',
    failure: null,
    kvUsage: 0.25,
    kvCapacityTokens: 10_000,
    running: 2,
    waiting: 1,
    prefixCacheHitRate: 0.5,
    preemptionsTotal: 0,
    engineStartedAtMs: null,
    healthy: true,
    consecutiveFailures: 0,
    consecutiveSuccesses: 3,
    healthyChangedAtMs: 0,
    scrapedAtMs: 1_000,
    restartedAtMs: null,
    loraAdapters: null,
    ...fields,
  };
}

/** A source that answers readAll from a list and lets the test publish messages. */
function aSource(
  initial: BackendState[],
): BackendStateSource & { publish(state: BackendState): void; all: BackendState[] } {
  let listener: ((state: BackendState) => void) | null = null;
  const source = {
    all: initial,
    readAll: async () => source.all,
    subscribe: (options: { onState: (state: BackendState) => void }) => {
      listener = options.onState;
      return { ready: Promise.resolve(true), stop: async () => undefined };
    },
    publish: (state: BackendState) => listener?.(state),
  };
  return source;
}

function aBackend(id: string): Backend {
  return {
    id,
    url: `http://${id}`,
    origin: `http://${id}`,
    basePath: '',
    info: { id, weight: 1 },
    configuredModels: null,
    breaker: new CircuitBreaker({ failureThreshold: 3, cooldownMs: 1000, nowMs: () => 0 }),
    engineId: id,
    dataParallel: null,
    dataParallelRank: null,
    kvEvents: null,
    role: 'both',
    bootstrapPort: null,
  };
}

describe('EngineStateView', () => {
  it('reads the published states, follows messages, and treats a stale state as unknown', async () => {
    let now = 1_500;
    const source = aSource([aState('a'), aState('b', { healthy: false })]);
    const view = new EngineStateView({ source, maxAgeMs: 2_000, refreshMs: 60_000, nowMs: () => now });
    await view.start();
    expect(view.verdict('a')).toEqual({
      kind: 'healthy',
      load: { kvUsage: 0.25, kvCapacityTokens: 10_000, running: 2, waiting: 1 },
    });
    expect(view.verdict('b')).toEqual({ kind: 'unhealthy' });
    expect(view.verdict('never-scraped')).toEqual({ kind: 'unknown' });
    source.publish(aState('b', { scrapedAtMs: 1_400 }));
    expect(view.verdict('b').kind).toBe('healthy');
    source.publish(aState('b', { healthy: false, scrapedAtMs: 1_200 })); // older than what we hold: ignored
    expect(view.verdict('b').kind).toBe('healthy');
    now = 3_300; // a's state is 2.3 s old
    expect(view.verdict('a')).toEqual({ kind: 'unknown' });
    await view.stop();
  });

  it('gives no load for a healthy backend whose metrics could not be read, and the queue without KV usage where only that is missing', async () => {
    const unread = {
      kvUsage: null,
      kvCapacityTokens: null,
      running: null,
      waiting: null,
      failure: 'metrics_status' as const,
    };
    const view = new EngineStateView({
      source: aSource([aState('a', unread), aState('llama', { kvUsage: null, running: 2, waiting: 4 })]),
      maxAgeMs: 5_000,
      refreshMs: 60_000,
      nowMs: () => 1_000,
    });
    await view.start();
    expect(view.verdict('a')).toEqual({ kind: 'healthy', load: null });
    expect(view.verdict('llama')).toEqual({
      kind: 'healthy',
      load: { kvUsage: null, kvCapacityTokens: 10_000, running: 2, waiting: 4 },
    });
    await view.stop();
  });
});

describe('EngineStateView: engine restarts', () => {
  it('tells each published restart once, whether it came by message or full read, and only when it moves forward', async () => {
    const source = aSource([aState('a'), aState('b')]);
    const view = new EngineStateView({ source, maxAgeMs: 2_000, refreshMs: 60_000, nowMs: () => 10_000 });
    await view.start();
    const told: Array<[string, number]> = [];
    view.followRestarts((backendId, restartedAtMs) => told.push([backendId, restartedAtMs]));
    source.publish(aState('a', { scrapedAtMs: 10_100, restartedAtMs: 10_100 }));
    // The same restart again: in the next states, and in a full read.
    source.publish(aState('a', { scrapedAtMs: 10_200, restartedAtMs: 10_100 }));
    source.all = [
      aState('a', { scrapedAtMs: 10_300, restartedAtMs: 10_100 }),
      aState('b', { scrapedAtMs: 10_300, restartedAtMs: 10_250 }),
    ];
    await view.refresh();
    source.publish(aState('a', { scrapedAtMs: 10_900, restartedAtMs: 10_900 }));
    expect(told).toEqual([
      ['a', 10_100],
      ['b', 10_250],
      ['a', 10_900],
    ]);
    await view.stop();
  });

  it('leaves restarts published well before its start to the replicas that were up, takes recent ones, and tells them to a late listener', async () => {
    const source = aSource([
      aState('old', { scrapedAtMs: 9_900, restartedAtMs: 4_000 }),
      aState('recent', { scrapedAtMs: 9_900, restartedAtMs: 8_500 }),
    ]);
    const view = new EngineStateView({ source, maxAgeMs: 2_000, refreshMs: 60_000, nowMs: () => 10_000 });
    await view.start();
    const told: string[] = [];
    view.followRestarts((backendId) => told.push(backendId));
    expect(told).toEqual(['recent']);
    source.publish(aState('old', { scrapedAtMs: 10_500, restartedAtMs: 10_500 }));
    expect(told).toEqual(['recent', 'old']);
    await view.stop();
  });

  it('keeps following when a listener throws, and reports the error', async () => {
    const errors: unknown[] = [];
    const source = aSource([aState('a')]);
    const view = new EngineStateView({
      source,
      maxAgeMs: 2_000,
      refreshMs: 60_000,
      nowMs: () => 1_000,
      onError: (error) => errors.push(error),
    });
    await view.start();
    view.followRestarts(() => {
      throw new Error('listener failed');
    });
    source.publish(aState('a', { scrapedAtMs: 1_100, restartedAtMs: 1_100 }));
    expect(errors).toHaveLength(1);
    expect(view.verdict('a').kind).toBe('healthy');
    await view.stop();
  });
});

describe('eligibleBackends', () => {
  it('drops unhealthy backends, keeps unknown ones, and hands the fresh loads on', async () => {
    const view = new EngineStateView({
      source: aSource([aState('a'), aState('b', { healthy: false })]),
      maxAgeMs: 5_000,
      refreshMs: 60_000,
      nowMs: () => 1_000,
    });
    await view.start();
    const backends = ['a', 'b', 'c'].map(aBackend);
    const result = eligibleBackends(backends, new Set(), view);
    expect(result.eligible.map((backend) => backend.id)).toEqual(['a', 'c']);
    expect(result.failedOpen).toBe(false);
    expect([...result.engine.keys()]).toEqual(['a']);
    // Only b left for a retry: the poller would leave nothing, so the try fails open to b.
    expect(eligibleBackends(backends, new Set(['a', 'c']), view)).toMatchObject({
      failedOpen: true,
      eligible: [{ id: 'b' }],
    });
    await view.stop();
  });

  it('fails open to the breaker’s view when the poller calls every backend unhealthy', async () => {
    const view = new EngineStateView({
      source: aSource([aState('a', { healthy: false }), aState('b', { healthy: false })]),
      maxAgeMs: 5_000,
      refreshMs: 60_000,
      nowMs: () => 1_000,
    });
    await view.start();
    const result = eligibleBackends(['a', 'b'].map(aBackend), new Set(), view);
    expect(result.failedOpen).toBe(true);
    expect(result.eligible.map((backend) => backend.id)).toEqual(['a', 'b']);
    await view.stop();
  });

  it('is the breaker’s view alone without a poller', () => {
    const result = eligibleBackends(['a', 'b'].map(aBackend), new Set(['b']), null);
    expect(result.eligible.map((backend) => backend.id)).toEqual(['a']);
    expect(result.engine.size).toBe(0);
  });
});
