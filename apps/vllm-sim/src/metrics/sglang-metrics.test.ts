import { describe, expect, it } from 'vitest';
import {
  addRequest,
  familyShapes,
  MODEL_NAME,
  newEngine,
  parseSamples,
  prefixTotals,
  rawValue,
  renderDialect,
  runMixedWorkload,
  runSteps,
  tokenPrompt,
} from './metrics-test-support';

/** Scheduler gauges carry the scheduler's labels; tokenizer-manager counters and histograms `model_name` only (reference §2). */
const SCHEDULER = ['engine_type', 'model_name', 'pp_rank', 'tp_rank'];
const TOKENIZER = ['model_name'];
const EXPECTED: Array<[string, string, string[]]> = [
  ['sglang:num_running_reqs', 'GAUGE', SCHEDULER],
  ['sglang:num_used_tokens', 'GAUGE', SCHEDULER],
  ['sglang:token_usage', 'GAUGE', SCHEDULER],
  ['sglang:num_queue_reqs', 'GAUGE', SCHEDULER],
  ['sglang:cache_hit_rate', 'GAUGE', SCHEDULER],
  ['sglang:max_total_num_tokens', 'GAUGE', SCHEDULER],
  ['sglang:prompt_tokens_total', 'COUNTER', TOKENIZER],
  ['sglang:generation_tokens_total', 'COUNTER', TOKENIZER],
  ['sglang:cached_tokens_total', 'COUNTER', TOKENIZER],
  ['sglang:num_requests_total', 'COUNTER', TOKENIZER],
  ['sglang:time_to_first_token_seconds', 'HISTOGRAM', TOKENIZER],
  ['sglang:inter_token_latency_seconds', 'HISTOGRAM', TOKENIZER],
  ['sglang:e2e_request_latency_seconds', 'HISTOGRAM', TOKENIZER],
];

describe('SGLang /metrics', () => {
  const workload = runMixedWorkload('v1');
  const text = renderDialect('sglang', workload.engine);

  it('has exactly the expected families, with their types and label names', () => {
    expect(familyShapes(text)).toEqual(
      new Map(EXPECTED.map(([name, type, labelNames]) => [name, { type, labelNames }])),
    );
  });

  it('has no _created families and prints histograms _sum first (multiprocess mode)', () => {
    expect(text).not.toContain('_created');
    const lines = text.split('\n');
    const type = lines.indexOf('# TYPE sglang:e2e_request_latency_seconds histogram');
    expect(lines[type + 1]?.startsWith(`sglang:e2e_request_latency_seconds_sum{model_name="${MODEL_NAME}"} `)).toBe(
      true,
    );
    expect(
      lines[type + 2]?.startsWith(`sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="${MODEL_NAME}"} `),
    ).toBe(true);
    const count = lines.findIndex((line) => line.startsWith('sglang:e2e_request_latency_seconds_count{'));
    expect(lines[count - 1]?.startsWith('sglang:e2e_request_latency_seconds_bucket{le="+Inf",')).toBe(true);
    expect(text).toContain(
      `sglang:num_running_reqs{engine_type="unified",model_name="${MODEL_NAME}",pp_rank="0",tp_rank="0"} 1.0\n`,
    );
  });

  it('uses SGLang bucket bounds', () => {
    const bounds = (family: string) =>
      parseSamples(text)
        .filter((sample) => sample.name === `${family}_bucket`)
        .map((sample) => sample.labels.le);
    expect(bounds('sglang:time_to_first_token_seconds').slice(0, 3)).toEqual(['0.1', '0.2', '0.4']);
    expect(bounds('sglang:time_to_first_token_seconds').slice(-2)).toEqual(['400.0', '+Inf']);
    expect(bounds('sglang:e2e_request_latency_seconds').slice(-5)).toEqual([
      '600.0',
      '1200.0',
      '1800.0',
      '2400.0',
      '+Inf',
    ]);
    expect(bounds('sglang:inter_token_latency_seconds').slice(0, 2)).toEqual(['0.002', '0.004']);
    expect(bounds('sglang:inter_token_latency_seconds').slice(-2)).toEqual(['8.0', '+Inf']);
  });

  it('counts cached tokens and finished requests, and reports the KV pool in tokens', () => {
    const engine = workload.engine;
    expect(Number(rawValue(text, 'sglang:cached_tokens_total'))).toBe(prefixTotals(workload.sequences).hit);
    // Prompt tokens of finished, non-aborted requests: two 2048-token ones and six of 100.
    expect(rawValue(text, 'sglang:prompt_tokens_total')).toBe(`${2 * 2048 + 6 * 100}.0`);
    expect(rawValue(text, 'sglang:num_requests_total')).toBe('9.0');
    expect(rawValue(text, 'sglang:max_total_num_tokens')).toBe('1.018864e+06'); // (63680 − 1) × 16
    const used = (engine.pool.numGpuBlocks - 1 - engine.pool.freeCount) * 16;
    expect(used).toBeGreaterThan(8192);
    expect(rawValue(text, 'sglang:num_used_tokens')).toBe(`${used}.0`);
    expect(rawValue(text, 'sglang:token_usage')).toBe('0.01');
  });

  it('rounds token_usage to two decimals like Python round (ties to even)', () => {
    // 8 usable blocks; one block in use → 0.125 → Python round gives 0.12.
    const engine = newEngine('v1', { numGpuBlocks: 9 });
    addRequest(engine, tokenPrompt(10, 3), 3, 'stop', 0);
    runSteps(engine, 0, 2);
    const small = renderDialect('sglang', engine);
    expect(rawValue(small, 'sglang:num_used_tokens')).toBe('16.0');
    expect(rawValue(small, 'sglang:max_total_num_tokens')).toBe('128.0');
    expect(rawValue(small, 'sglang:token_usage')).toBe('0.12');
  });

  it('reports the hit rate of the last prefill batch', () => {
    const engine = newEngine('v1');
    const prompt = tokenPrompt(1024, 8);
    addRequest(engine, prompt, 1, 'stop', 0);
    const now = runSteps(engine, 0);
    addRequest(engine, prompt, 1, 'stop', now);
    runSteps(engine, now);
    expect(Number(rawValue(renderDialect('sglang', engine), 'sglang:cache_hit_rate'))).toBe(1008 / 1024);
  });
});
