import { createServer, type Server } from 'node:http';
import { createLogger } from '@kvroute/platform';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HealthPoller } from '../src/create-poller';
import { openTestEnv, stateOf, waitForValue, type TestEnv } from './poller-test-kit';

/**
 * LoRA adapter residency end to end on loopback: a fake vLLM backend (real HTTP) whose `/metrics` the
 * test rewrites, one poller replica, a Redis of this file's own. The published BackendState carries the
 * newest `vllm:lora_requests_info` series' adapters (older label sets linger, as vLLM leaves them); a
 * malformed one is published as unknown (null), counted per scrape, and logged once when it turns bad and
 * once when it is readable again.
 */
const POLLER = {
  intervalMs: 200,
  scrapeTimeoutMs: 150,
  jobLockMs: 2000,
  stalledCheckMs: 2000,
  reconcileMs: 1000,
  backendSetPollMs: 200,
};

const LOAD = [
  'vllm:num_requests_running{engine="0",model_name="base"} 3.0',
  'vllm:num_requests_waiting{engine="0",model_name="base"} 1.0',
  'vllm:kv_cache_usage_perc{engine="0",model_name="base"} 0.25',
  '# TYPE vllm:lora_requests_info gauge',
];

function info(running: string, waiting: string, value: string): string {
  return `vllm:lora_requests_info{max_lora="2",running_lora_adapters="${running}",waiting_lora_adapters="${waiting}"} ${value}`;
}

/** Two lingering older label sets and the current one, in no particular order. */
const WITH_LINGERING = [
  ...LOAD,
  info('old', 'older', '1.789828400e+09'),
  info('sql-lora,alpaca', '', '1.789828498802105e+09'),
  info('', 'old', '1.789828300e+09'),
].join('\n');
const MALFORMED = [...LOAD, info('alpaca', '', 'NaN'), info('sql-lora', '', '1.7898e+09')].join('\n');
const NEXT = [...LOAD, info('sql-lora,alpaca', '', '1.789828498802105e+09'), info('alpaca', 'chat', '1.79e+09')].join(
  '\n',
);

let env: TestEnv;
let backend: { server: Server; url: string; id: string };
let metricsBody = WITH_LINGERING;
let poller: HealthPoller;
const logLines: Array<{ level: string; msg: string; backend?: string }> = [];

beforeAll(async () => {
  env = await openTestEnv();
  env.beginTest('lora-adapters');
  const server = createServer((request, response) => {
    response.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    response.end(request.url === '/metrics' ? metricsBody : '');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  backend = { server, url, id: new URL(url).host };
  const logger = createLogger({
    service: 'kvroute-poller',
    level: 'info',
    destination: { write: (line: string) => void logLines.push(JSON.parse(line)) },
  });
  poller = await env.startPoller({ ...POLLER, backends: [url] }, { logger });
});
afterAll(async () => {
  await env.close();
  await new Promise((resolve) => backend.server.close(resolve));
});

async function malformedCount(): Promise<number> {
  const metric = await poller.metrics.registry.getSingleMetric('kvroute_poller_lora_info_malformed_total')?.get();
  return metric?.values.find((value) => value.labels['backend'] === backend.id)?.value ?? 0;
}

const loraLogs = () => logLines.filter((line) => line.msg.includes('lora_requests_info'));

describe('LoRA adapter residency', () => {
  it('publishes the newest series, counts and ignores a malformed one, logging each change once', async () => {
    const first = await waitForValue(stateOf(env, backend.id), (state) => state?.loraAdapters != null);
    expect(first.value).toMatchObject({
      healthy: true,
      running: 3,
      loraAdapters: { running: ['alpaca', 'sql-lora'], waiting: [], maxLoras: 2 },
    });
    // The state as Redis holds it: an empty list stays a list.
    const raw = await env.client.hget(`${env.namespace}:{fleet}:backend-state:${backend.id}`, 'state');
    expect(raw).toContain('"waiting":[]');

    metricsBody = MALFORMED;
    await waitForValue(malformedCount, (count) => count >= 3, 5000);
    const state = await env.store.read(backend.id);
    // Unknown while malformed, and the rest of the scrape still published.
    expect(state).toMatchObject({ healthy: true, failure: null, running: 3, waiting: 1, loraAdapters: null });
    expect(loraLogs().map((line) => [line.level, line.msg, line.backend])).toEqual([
      ['warn', 'vllm:lora_requests_info is malformed: LoRA residency unknown', backend.id],
    ]);

    metricsBody = NEXT;
    const back = await waitForValue(stateOf(env, backend.id), (value) => value?.loraAdapters != null);
    expect(back.value?.loraAdapters).toEqual({ running: ['alpaca'], waiting: ['chat'], maxLoras: 2 });
    const counted = await malformedCount();
    await new Promise((resolve) => setTimeout(resolve, 3 * POLLER.intervalMs));
    expect(await malformedCount()).toBe(counted);
    expect(loraLogs().map((line) => [line.level, line.msg])).toEqual([
      ['warn', 'vllm:lora_requests_info is malformed: LoRA residency unknown'],
      ['info', 'vllm:lora_requests_info is readable again'],
    ]);
  });
});
