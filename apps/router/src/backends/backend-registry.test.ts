import { describe, expect, it, vi } from 'vitest';
import { BackendRegistry, type Backend } from './backend-registry';

const options = (fetchModels: (backend: Backend) => Promise<readonly string[]>) => ({
  breakerFailureThreshold: 3,
  breakerCooldownMs: 1000,
  nowMs: () => 0,
  fetchModels,
});

describe('BackendRegistry', () => {
  it('derives ids from host:port and forms pools per model, in config order', async () => {
    const registry = new BackendRegistry(
      [
        { url: 'http://127.0.0.1:8001', weight: 1 },
        { url: 'http://127.0.0.1:8002/v1', id: 'b', models: ['m1', 'm2'], weight: 2 },
        { url: 'http://127.0.0.1:8003', weight: 1 },
      ],
      options(async (backend) => (backend.id === '127.0.0.1:8001' ? ['m1'] : ['m3'])),
    );
    await registry.refreshModels();
    expect(registry.poolFor('m1').map((backend) => backend.id)).toEqual(['127.0.0.1:8001', 'b']);
    expect(registry.poolFor('m2').map((backend) => backend.id)).toEqual(['b']);
    expect(registry.poolFor('m3').map((backend) => backend.id)).toEqual(['127.0.0.1:8003']);
    expect(registry.poolFor('nope')).toEqual([]);
    expect(registry.get('b')?.basePath).toBe('');
    expect(registry.get('b')?.info.weight).toBe(2);
  });

  it('keeps the last known models of a backend that cannot be reached', async () => {
    let reachable = true;
    const registry = new BackendRegistry(
      [{ url: 'http://127.0.0.1:8001', weight: 1 }],
      options(async () => {
        if (!reachable) throw new Error('down');
        return ['m'];
      }),
    );
    await registry.refreshModels();
    reachable = false;
    await registry.refreshModels();
    expect(registry.poolFor('m')).toHaveLength(1);
  });

  it('rejects duplicate ids', () => {
    expect(
      () =>
        new BackendRegistry(
          [
            { url: 'http://a:1', weight: 1 },
            { url: 'http://a:1', weight: 1 },
          ],
          options(async () => []),
        ),
    ).toThrow(/duplicate/);
  });
});

describe('BackendRegistry changes at run time', () => {
  const configured = (url: string, id: string, models = ['m']) => ({ url, id, models, weight: 1 });

  it('keeps a drained backend registered but out of every pool, and brings it back on undrain', () => {
    const registry = new BackendRegistry(
      [configured('http://h:1', 'a'), configured('http://h:2', 'b')],
      options(async () => []),
    );
    expect(registry.setDrained('a', true)).toBe(true);
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['b']);
    expect(registry.backends.map((backend) => backend.id)).toEqual(['a', 'b']);
    expect(registry.isDrained('a')).toBe(true);
    registry.setDrained('b', true);
    // The model still exists (404 vs 503), it just has nowhere to go.
    expect(registry.poolFor('m')).toEqual([]);
    expect(registry.models()).toEqual([]);
    expect(registry.servesModel('m')).toBe(true);
    registry.setDrained('a', false);
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['a']);
    expect(registry.setDrained('nope', true)).toBe(false);
  });

  it('adds a backend last and reads its models at once; removes one and reports it with its models', async () => {
    const removed: Array<[string, readonly string[]]> = [];
    const registry = new BackendRegistry([configured('http://h:1', 'a')], {
      ...options(async (backend) => (backend.id === 'h:3' ? ['m', 'm2'] : [])),
      onRemoved: (backend, models) => removed.push([backend.id, models]),
    });
    const before = registry.poolFor('m');
    const added = registry.add({ url: 'http://h:3', weight: 2 });
    expect(added.map((backend) => backend.id)).toEqual(['h:3']);
    expect(() => registry.add({ url: 'http://other:3', id: 'h:3', weight: 1 })).toThrow(/duplicate/);
    await vi.waitFor(() => expect(registry.poolFor('m2').map((backend) => backend.id)).toEqual(['h:3']));
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['a', 'h:3']);
    // A request that started before keeps the pool it had.
    expect(before.map((backend) => backend.id)).toEqual(['a']);
    expect(registry.remove('a')).toBe(true);
    expect(registry.remove('a')).toBe(false);
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['h:3']);
    expect(removed).toEqual([['a', ['m']]]);
  });

  it('replaceAll keeps unchanged backends (object, circuit), replaces changed ones in place, drops gone ones and appends new ones', () => {
    const removed: string[] = [];
    const registry = new BackendRegistry(
      [configured('http://h:1', 'a'), configured('http://h:2', 'b'), configured('http://h:3', 'c')],
      {
        ...options(async () => []),
        onRemoved: (backend, _models, departure) => removed.push(`${backend.id}@${backend.origin} ${departure}`),
      },
    );
    const [a, b] = registry.backends;
    registry.replaceAll([
      { spec: configured('http://h:9', 'z'), drained: false },
      { spec: configured('http://h:1', 'a'), drained: true },
      { spec: configured('http://h:22', 'b'), drained: false },
      { spec: { ...configured('http://h:4', 'd'), weight: 3 }, drained: false },
    ]);
    expect(registry.backends.map((backend) => backend.id)).toEqual(['a', 'b', 'z', 'd']);
    expect(registry.get('a')).toBe(a);
    expect(registry.get('b')).not.toBe(b);
    expect(registry.get('b')?.origin).toBe('http://h:22');
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['b', 'z', 'd']);
    expect(removed).toEqual(['b@http://h:2 moved', 'c@http://h:3 removed']);
    registry.replaceAll([
      { spec: configured('http://h:1', 'a'), drained: true },
      { spec: configured('http://h:4', 'd'), drained: false },
    ]);
    expect(registry.get('d')?.info.weight).toBe(1);
    expect(removed.slice(2)).toEqual(['b@http://h:22 removed', 'z@http://h:9 removed', 'd@http://h:4 updated']);
    registry.replaceAll([{ spec: configured('http://h:1', 'a'), drained: false }]);
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['a']);
  });

  it('finds a backend by URL whatever its id', () => {
    const registry = new BackendRegistry(
      [configured('http://h:1/v1', 'a')],
      options(async () => []),
    );
    expect(registry.findByUrl('http://h:1')?.id).toBe('a');
    expect(registry.findByUrl('http://h:1/v1/')?.id).toBe('a');
    expect(registry.findByUrl('http://h:2')).toBeUndefined();
  });
});

describe('BackendRegistry: models pending at start', () => {
  /** Timers stepped by hand: `due` lists the pending ones with their delays. */
  function manualTimers() {
    const due: Array<{ run: () => void; delayMs: number; cleared: boolean }> = [];
    return {
      due,
      timers: {
        set: (run: () => void, delayMs: number) => {
          const entry = { run, delayMs, cleared: false };
          due.push(entry);
          return entry;
        },
        clear: (handle: unknown) => {
          (handle as { cleared: boolean }).cleared = true;
        },
      },
      /** Runs the pending timers (those set by the runs wait for the next call). */
      fire() {
        for (const entry of due.splice(0)) if (!entry.cleared) entry.run();
      },
    };
  }

  it('retries an unreachable backend on a growing backoff until it answers, then stops retrying', async () => {
    let listening = false;
    let reads = 0;
    const failures: number[] = [];
    const clock = manualTimers();
    const registry = new BackendRegistry([{ url: 'http://h:1', weight: 1 }], {
      ...options(async () => {
        reads++;
        if (!listening) throw new Error('ECONNREFUSED');
        return ['m'];
      }),
      random: () => 0,
      timers: clock.timers,
      onRefreshError: (_backend, _error, modelsReadFailures) => failures.push(modelsReadFailures),
    });
    expect(registry.modelsPending()).toBe(true);
    await registry.refreshModels();
    const delays: number[] = [];
    for (let round = 0; round < 3; round++) {
      expect(clock.due).toHaveLength(1);
      delays.push(clock.due[0]?.delayMs as number);
      clock.fire();
      await vi.waitFor(() => expect(reads).toBe(round + 2));
      await vi.waitFor(() => expect(clock.due).toHaveLength(1));
    }
    expect(delays).toEqual([125, 250, 500]);
    expect(registry.backendsWithModelsPending().map((backend) => backend.id)).toEqual(['h:1']);
    listening = true;
    clock.fire();
    await vi.waitFor(() => expect(registry.poolFor('m')).toHaveLength(1));
    expect(registry.modelsPending()).toBe(false);
    // Known: no retry pending; a later failed refresh keeps the models and schedules nothing.
    expect(clock.due).toHaveLength(0);
    listening = false;
    await registry.refreshModels();
    expect(clock.due).toHaveLength(0);
    expect(registry.poolFor('m')).toHaveLength(1);
    // Failures in a row while pending (the owner logs the first and then now and then), then a refresh's (0).
    expect(failures).toEqual([1, 2, 3, 4, 0]);
  });

  it('counts configured backends as known, and a backend answering an empty list too', async () => {
    const registry = new BackendRegistry(
      [
        { url: 'http://h:1', models: ['m'], weight: 1 },
        { url: 'http://h:2', weight: 1 },
      ],
      options(async () => []),
    );
    expect(registry.backendsWithModelsPending().map((backend) => backend.id)).toEqual(['h:2']);
    await registry.refreshModels();
    expect(registry.modelsPending()).toBe(false);
  });

  it('cancels the retry of a backend that leaves, and every retry on stop', async () => {
    const clock = manualTimers();
    const registry = new BackendRegistry(
      [
        { url: 'http://h:1', weight: 1 },
        { url: 'http://h:2', weight: 1 },
      ],
      {
        ...options(async () => {
          throw new Error('down');
        }),
        timers: clock.timers,
      },
    );
    await registry.refreshModels();
    expect(clock.due.filter((entry) => !entry.cleared)).toHaveLength(2);
    registry.remove('h:1');
    expect(clock.due.filter((entry) => !entry.cleared)).toHaveLength(1);
    expect(registry.backendsWithModelsPending().map((backend) => backend.id)).toEqual(['h:2']);
    registry.stop();
    expect(clock.due.filter((entry) => !entry.cleared)).toHaveLength(0);
    // A read failing after stop schedules nothing.
    await registry.refreshModels();
    expect(clock.due.filter((entry) => !entry.cleared)).toHaveLength(0);
  });

  it('holds back unknown models only within modelsPendingMaxMs of a backend being added, and never for a drained one', async () => {
    const clock = manualTimers();
    let nowMs = 1_000;
    let listening = false;
    const registry = new BackendRegistry(
      [
        { url: 'http://h:1', weight: 1 },
        { url: 'http://h:2', weight: 1 },
      ],
      {
        ...options(async () => {
          if (!listening) throw new Error('ECONNREFUSED');
          return ['m'];
        }),
        nowMs: () => nowMs,
        timers: clock.timers,
        modelsPendingMaxMs: 500,
      },
    );
    await registry.refreshModels();
    expect(registry.modelsPending()).toBe(true);
    // Draining one leaves the other holding back; draining both, none does.
    registry.setDrained('h:1', true);
    expect(registry.modelsPending()).toBe(true);
    registry.setDrained('h:2', true);
    expect(registry.modelsPending()).toBe(false);
    registry.setDrained('h:1', false);
    registry.setDrained('h:2', false);
    nowMs += 499;
    expect(registry.modelsPending()).toBe(true);
    nowMs += 1;
    expect(registry.modelsPending()).toBe(false);
    // Past the window both are still reported pending, with their ages, and still retried.
    expect(
      registry.pendingModelsReport().map((entry) => [entry.backend.id, entry.ageMs, entry.holdsUnknownModels]),
    ).toEqual([
      ['h:1', 500, false],
      ['h:2', 500, false],
    ]);
    expect(clock.due.filter((entry) => !entry.cleared)).toHaveLength(2);
    // A backend added later has a window of its own.
    registry.add({ url: 'http://h:3', weight: 1 });
    await vi.waitFor(() => expect(registry.backendsWithModelsPending()).toHaveLength(3));
    expect(registry.modelsPending()).toBe(true);
    expect(registry.pendingModelsReport().find((entry) => entry.backend.id === 'h:3')).toMatchObject({
      ageMs: 0,
      holdsUnknownModels: true,
    });
    // The retries go on past the window: an answer makes the models count.
    listening = true;
    clock.fire();
    await vi.waitFor(() => expect(registry.poolFor('m').length).toBeGreaterThan(0));
  });
});
