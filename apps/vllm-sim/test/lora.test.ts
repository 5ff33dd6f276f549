import { afterEach, describe, expect, it } from 'vitest';
import type { SimConfig } from '../src/config';
import { postJson, scrapeMetrics, startTestSim, type TestSim } from './start-test-sim';

let sims: TestSim[] = [];
afterEach(async () => {
  await Promise.all(sims.map((sim) => sim.close()));
  sims = [];
});

async function start(overrides: Partial<SimConfig>): Promise<TestSim> {
  const sim = await startTestSim(overrides);
  sims.push(sim);
  return sim;
}

const PROMPT = 'Summarise the routing notes for the adapter team, please. '.repeat(20);

/** A non-streaming completion: its status, cached tokens and wall time to the whole answer. */
async function complete(
  sim: TestSim,
  model: string,
  options: { prompt?: string; maxTokens?: number } = {},
): Promise<{ status: number; json: any; cached: number; wallMs: number }> {
  const started = performance.now();
  const { status, json } = await postJson(sim.url, '/v1/completions', {
    model,
    prompt: options.prompt ?? PROMPT,
    max_tokens: options.maxTokens ?? 2,
    ignore_eos: true,
  });
  return {
    status,
    json,
    cached: json?.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    wallMs: performance.now() - started,
  };
}

async function waitFor(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

async function post(sim: TestSim, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const response = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}

describe('vllm-sim LoRA adapters', () => {
  it('lists one /v1/models card per adapter: id = name, root = path, parent = the served model', async () => {
    const sim = await start({
      loraModules:
        '{"name":"sql","path":"/adapters/sql","base_model_name":"test-model"},{"name":"chat","path":"/a/chat"}',
    });
    const response = await fetch(`${sim.url}/v1/models`);
    const { data } = (await response.json()) as { data: Array<Record<string, unknown>> };
    expect(data.map((card) => [card.id, card.root, card.parent])).toEqual([
      ['test-model', 'test-model', null],
      ['sql', '/adapters/sql', 'test-model'],
      ['chat', '/a/chat', 'test-model'],
    ]);
    expect(data[1]).toMatchObject({ object: 'model', owned_by: 'vllm', max_model_len: null });
  });

  it('answers a model that is neither the served model nor an adapter with 404 in OpenAI error shape', async () => {
    const sim = await start({ loraModules: 'sql=/adapters/sql' });
    const ok = await complete(sim, 'sql');
    expect(ok.status).toBe(200);
    expect(ok.json.model).toBe('sql');
    const missing = await complete(sim, 'nope');
    expect(missing.status).toBe(404);
    expect(missing.json).toEqual({
      error: { message: 'The model `nope` does not exist.', type: 'NotFoundError', param: null, code: 404 },
    });
  });

  it('keys the prefix cache by adapter: the same prompt under another adapter or the base model hits nothing', async () => {
    const sim = await start({ loraModules: 'a=/p/a,b=/p/b', maxLoras: 2, timeScale: 20 });
    expect((await complete(sim, 'a')).cached).toBe(0);
    expect((await complete(sim, 'b')).cached).toBe(0);
    expect((await complete(sim, 'test-model')).cached).toBe(0);
    const again = await complete(sim, 'a');
    expect(again.cached).toBeGreaterThan(0);
    expect((await postJson(sim.url, '/sim/match', { model: 'b', prompt: PROMPT })).json.cached_tokens).toBe(
      again.cached,
    );
    expect((await postJson(sim.url, '/sim/match', { model: 'c', prompt: PROMPT })).status).toBe(404);
  });

  it('runs at most --max-loras distinct adapters at once: the third waits, a base-model request does not', async () => {
    const sim = await start({ loraModules: 'a=/p/a,b=/p/b,c=/p/c', maxLoras: 2, maxCpuLoras: 3 });
    const long = { maxTokens: 40, prompt: 'one short prompt' };
    const requests = [complete(sim, 'a', long), complete(sim, 'b', long)];
    await waitFor(() => sim.sim.engine.runningCount === 2);
    const third = complete(sim, 'c', long);
    const base = complete(sim, 'test-model', long);
    await waitFor(() => sim.sim.engine.runningCount + sim.sim.engine.waitingCount === 4);
    await new Promise((resolve) => setTimeout(resolve, 60));
    const running = sim.sim.engine.runningSequences.map((sequence) => sequence.spec.lora?.name ?? 'base');
    expect(running.sort()).toEqual(['a', 'b', 'base']);
    expect(sim.sim.engine.waitingCount).toBe(1);
    await Promise.all([...requests, third, base]);
  });

  it('makes a request wait --lora-load-ms for an adapter that is not loaded, and not again once it is', async () => {
    // One CPU slot: loading b at start evicted a.
    const sim = await start({ loraModules: 'a=/p/a,b=/p/b', maxCpuLoras: 1, loraLoadMs: 300 });
    const cold = await complete(sim, 'a', { prompt: 'cold adapter' });
    const warm = await complete(sim, 'a', { prompt: 'warm adapter' });
    expect(cold.wallMs - warm.wallMs).toBeGreaterThan(250);
  });

  it('reloads an adapter the CPU cache evicted (least recently used first)', async () => {
    const sim = await start({ loraModules: 'a=/p/a,b=/p/b,c=/p/c', maxLoras: 1, maxCpuLoras: 2, loraLoadMs: 5 });
    // Start: a, b, c read in order; c evicted a.
    const loads = async () => ((await (await fetch(`${sim.url}/sim/lora`)).json()) as any).ranks[0].loads;
    expect(await loads()).toEqual({ a: 1, b: 1, c: 1 });
    await complete(sim, 'a'); // read again; evicts b (least recently used)
    await complete(sim, 'c'); // still loaded
    await complete(sim, 'b'); // read again; evicts a
    expect(await loads()).toEqual({ a: 2, b: 2, c: 1 });
    const family = (await scrapeMetrics(sim.url)).get('kvroute_sim_lora_loads_total');
    expect(family?.metrics.map((sample) => [sample.labels?.adapter, Number(sample.value)])).toEqual([
      ['a', 2],
      ['b', 2],
      ['c', 1],
    ]);
  });

  it('serves the runtime load and unload endpoints only when allowed, with vLLM bodies and statuses', async () => {
    const closed = await start({ loraModules: 'a=/p/a' });
    expect((await post(closed, '/v1/load_lora_adapter', { lora_name: 'x', lora_path: '/p/x' })).status).toBe(404);
    expect((await post(closed, '/v1/unload_lora_adapter', { lora_name: 'a' })).status).toBe(404);

    const sim = await start({ allowRuntimeLoraUpdating: true, loraLoadMs: 150 });
    const started = performance.now();
    const loaded = await post(sim, '/v1/load_lora_adapter', { lora_name: 'x', lora_path: '/p/x' });
    expect(performance.now() - started).toBeGreaterThan(140);
    expect(loaded).toEqual({ status: 200, text: "Success: LoRA adapter 'x' added successfully." });
    expect((await complete(sim, 'x')).status).toBe(200);

    const twice = await post(sim, '/v1/load_lora_adapter', { lora_name: 'x', lora_path: '/p/x' });
    expect(twice.status).toBe(400);
    expect(JSON.parse(twice.text).error).toMatchObject({
      type: 'InvalidUserInput',
      code: 400,
      message:
        "The lora adapter 'x' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.",
    });
    const inplace = await post(sim, '/v1/load_lora_adapter', {
      lora_name: 'x',
      lora_path: '/p/x2',
      load_inplace: true,
    });
    expect(inplace.status).toBe(200);
    const cards = ((await (await fetch(`${sim.url}/v1/models`)).json()) as any).data;
    expect(cards[1]).toMatchObject({ id: 'x', root: '/p/x2' });

    const unloaded = await post(sim, '/v1/unload_lora_adapter', { lora_name: 'x' });
    expect(unloaded).toEqual({ status: 200, text: "Success: LoRA adapter 'x' removed successfully." });
    const again = await post(sim, '/v1/unload_lora_adapter', { lora_name: 'x' });
    expect(again.status).toBe(404);
    expect(JSON.parse(again.text).error).toMatchObject({
      type: 'NotFoundError',
      message: "The lora adapter 'x' cannot be found.",
    });
    expect((await complete(sim, 'x')).status).toBe(404);
  });

  it('exposes vllm:lora_requests_info as vLLM: a time-valued gauge per label set, old sets lingering', async () => {
    const sim = await start({ loraModules: 'a=/p/a,b=/p/b', maxLoras: 1, loraLoadMs: 1 });
    expect((await scrapeMetrics(sim.url)).has('vllm:lora_requests_info')).toBe(false);
    const first = complete(sim, 'a', { maxTokens: 20, prompt: 'first' });
    // A step with only a's request listed, then b's arrives (and waits: one adapter per batch).
    await waitFor(() => (sim.sim.engine.lora?.infoSeries.size ?? 0) === 1);
    const second = complete(sim, 'b', { maxTokens: 60, prompt: 'second' });
    await first;
    await waitFor(() => (sim.sim.engine.lora?.infoSeries.size ?? 0) >= 3);
    const text = await (await fetch(`${sim.url}/metrics`)).text();
    expect(text).toContain('# TYPE vllm:lora_requests_info gauge');
    const family = (await scrapeMetrics(sim.url)).get('vllm:lora_requests_info');
    const series = family?.metrics ?? [];
    for (const sample of series) {
      expect(Object.keys(sample.labels ?? {}).sort()).toEqual([
        'max_lora',
        'running_lora_adapters',
        'waiting_lora_adapters',
      ]);
      expect(sample.labels?.max_lora).toBe('1');
      expect(Math.abs(Number(sample.value) - Date.now() / 1000)).toBeLessThan(60);
    }
    const labelsOf = (sample: (typeof series)[number]) =>
      `${sample.labels?.running_lora_adapters}|${sample.labels?.waiting_lora_adapters}`;
    expect(series.map(labelsOf)).toEqual(expect.arrayContaining(['a|a', 'a,b|a,b', 'b|b']));
    // The newest series (largest value) is the current one: only b has requests now.
    const newest = series.reduce((best, sample) => (Number(sample.value) > Number(best.value) ? sample : best));
    expect(labelsOf(newest)).toBe('b|b');
    await second;
  });
});
