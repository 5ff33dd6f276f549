import { NIXL_PREFILL_PARAMS } from '@kvroute/protocols';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  histogramTotals,
  postJson,
  postStream,
  scrapeMetrics,
  startTestSim,
  type MetricFamily,
  type TestSim,
} from './start-test-sim';

/**
 * Prefill/decode as vLLM's NixlConnector and its toy proxy run it (README "Prefill/decode"): leg 1 to a prefill
 * sim answers kv_transfer_params and holds the blocks; leg 2 to a decode sim with those params pulls the KV instead of
 * prefilling, streams the answer, and frees the prefill side's blocks.
 */
/** Leg 1's params exactly as vLLM's toy proxy (and kvroute) send them. */
const LEG1_PARAMS = NIXL_PREFILL_PARAMS;

function conversation(seed: number): object {
  return {
    model: 'test-model',
    messages: [{ role: 'user', content: `conversation ${seed}: ${'a long shared document line. '.repeat(900)}` }],
    max_tokens: 8,
  };
}

function bySource(families: Map<string, MetricFamily>): Record<string, number> {
  const family = families.get('vllm:prompt_tokens_by_source_total');
  return Object.fromEntries((family?.metrics ?? []).map((metric) => [metric.labels?.source, Number(metric.value)]));
}

async function kvUsage(url: string): Promise<number> {
  return Number((await scrapeMetrics(url)).get('vllm:kv_cache_usage_perc')?.metrics[0]?.value);
}

describe('vllm-sim prefill/decode (NIXL)', () => {
  let prefill: TestSim;
  let decode: TestSim;
  let plain: TestSim;
  beforeAll(async () => {
    // Real time: at a faster scale a busy machine's timer lag, multiplied by the scale, would swamp the pull's ~40 ms.
    const common = { profile: 'a100-8b', timeScale: 1 } as const;
    prefill = await startTestSim({ ...common, pdRole: 'prefill' });
    decode = await startTestSim({ ...common, pdRole: 'decode' });
    plain = await startTestSim(common);
  });
  afterAll(async () => {
    await Promise.all([prefill.close(), decode.close(), plain.close()]);
  });

  it('leg 1: the prefill sim answers the params the decode side needs and holds the blocks', async () => {
    const body = conversation(1);
    const leg1 = await postJson(prefill.url, '/v1/chat/completions', {
      ...body,
      max_tokens: 1,
      stream: false,
      kv_transfer_params: LEG1_PARAMS,
    });
    expect(leg1.status).toBe(200);
    const params = leg1.json.kv_transfer_params;
    const port = Number(new URL(prefill.url).port);
    expect(params).toMatchObject({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_host: '127.0.0.1',
      remote_port: port,
      remote_num_tokens: leg1.json.usage.prompt_tokens,
      transfer_mode: 'pull',
      tp_size: 1,
    });
    expect(params.remote_block_ids).toHaveLength(1);
    expect(params.remote_block_ids[0].length).toBe(Math.ceil((leg1.json.usage.prompt_tokens + 1) / 16));
    expect(typeof params.remote_request_id).toBe('string');
    expect(params.remote_blocks_expiry_time).toBeGreaterThan(Date.now() / 1000 + 20);
    // Held: the finished request's blocks still count as used.
    expect(await kvUsage(prefill.url)).toBeGreaterThan(0);
    // Without a connector the params are ignored, as vLLM does.
    const ignored = await postJson(plain.url, '/v1/chat/completions', {
      ...body,
      max_tokens: 1,
      kv_transfer_params: LEG1_PARAMS,
    });
    expect(ignored.status).toBe(200);
    expect(ignored.json.kv_transfer_params).toBeNull();
    expect(await kvUsage(plain.url)).toBe(0);
  });

  it('leg 2: the decode sim pulls the KV instead of prefilling, streams far sooner than a cold prefill, and frees the prefill side', async () => {
    const body = conversation(2);
    const heldBefore = await kvUsage(prefill.url);
    const leg1 = await postJson(prefill.url, '/v1/chat/completions', {
      ...body,
      max_tokens: 1,
      stream: false,
      kv_transfer_params: LEG1_PARAMS,
    });
    const promptTokens = leg1.json.usage.prompt_tokens as number;
    const leg2 = await postStream(decode.url, '/v1/chat/completions', {
      ...body,
      stream_options: { include_usage: true },
      kv_transfer_params: leg1.json.kv_transfer_params,
    });
    expect(leg2.status).toBe(200);
    const usage = JSON.parse(
      (leg2.events.filter((event) => event.includes('"usage":{')).pop() as string).slice('data: '.length),
    ).usage;
    // vLLM counts the pulled tokens as cached (the llm-d sidecar rewrites this with the prefill side's figure).
    expect(usage.prompt_tokens_details.cached_tokens).toBe(promptTokens - 1);
    const sources = bySource(await scrapeMetrics(decode.url));
    expect(sources.external_kv_transfer).toBeGreaterThanOrEqual(promptTokens - 1);
    // Engine TTFT (simulated time, whatever this machine's load): the pull against a cold prefill of the same size.
    const plainBefore = await histogramTotals(plain.url, 'vllm:time_to_first_token_seconds');
    await postStream(plain.url, '/v1/chat/completions', conversation(3));
    const plainAfter = await histogramTotals(plain.url, 'vllm:time_to_first_token_seconds');
    const coldSeconds = plainAfter.sum - plainBefore.sum;
    const pulled = await histogramTotals(decode.url, 'vllm:time_to_first_token_seconds');
    expect(pulled.count).toBe(1);
    expect(pulled.sum).toBeLessThan(coldSeconds / 3);
    // The decode side said it read the blocks: the prefill side's usage falls back to what it held before leg 1.
    const deadline = Date.now() + 3_000;
    while ((await kvUsage(prefill.url)) > heldBefore && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    expect(await kvUsage(prefill.url)).toBe(heldBefore);
    const transfers = (await scrapeMetrics(decode.url)).get('vllm:nixl_xfer_time_seconds');
    expect(transfers).toBeDefined();
  });

  it('SGLang: the same body to a prefill and a decode sim at once; the decode sim waits for the room and pulls', async () => {
    const body = conversation(5);
    const bootstrap = {
      bootstrap_host: '127.0.0.1',
      bootstrap_port: Number(new URL(prefill.url).port),
      bootstrap_room: 2 ** 52 + 7,
    };
    const decodeBefore = await histogramTotals(decode.url, 'vllm:time_to_first_token_seconds');
    const [fromPrefill, fromDecode] = await Promise.all([
      postJson(prefill.url, '/v1/chat/completions', { ...body, ...bootstrap }),
      postJson(decode.url, '/v1/chat/completions', { ...body, ...bootstrap }),
    ]);
    expect(fromPrefill.status).toBe(200);
    expect(fromPrefill.json.usage.completion_tokens).toBe(1);
    expect(fromDecode.status).toBe(200);
    expect(fromDecode.json.usage.completion_tokens).toBe(8);
    expect(fromDecode.json.usage.prompt_tokens_details.cached_tokens).toBe(fromDecode.json.usage.prompt_tokens - 1);
    const decodeAfter = await histogramTotals(decode.url, 'vllm:time_to_first_token_seconds');
    expect(decodeAfter.count - decodeBefore.count).toBe(1);
    const missing = await postJson(decode.url, '/v1/chat/completions', { ...body, ...bootstrap, bootstrap_room: -1 });
    expect(missing.status).toBe(400);
  });

  it('refuses kv_transfer_params that are not an object with a 400, and the side channel refuses a bad notice', async () => {
    const bad = await postJson(prefill.url, '/v1/chat/completions', {
      ...conversation(4),
      kv_transfer_params: 'yes',
    });
    expect(bad.status).toBe(400);
    const notice = await postJson(prefill.url, '/sim/kv-transfer/done', { remote_request_id: 7 });
    expect(notice.status).toBe(400);
    const unknown = await postJson(prefill.url, '/sim/kv-transfer/done', { remote_request_id: 'nobody' });
    expect(unknown.json).toEqual({ released: false });
  });
});
