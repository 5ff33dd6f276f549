import { parseEngineMetrics } from '@kvroute/engine-metrics';
import { describe, expect, it } from 'vitest';
import { ScrapeRequestError, type HttpAnswer, type HttpGet } from './http-get';
import { scrapeBackend } from './scrape-backend';

const VLLM_TEXT = [
  '# TYPE vllm:num_requests_running gauge',
  'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
  '# TYPE vllm:num_requests_waiting gauge',
  'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0',
  '# TYPE vllm:kv_cache_usage_perc gauge',
  'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
  '',
].join('\n');

const LLAMACPP_TEXT = [
  '# TYPE llamacpp:requests_processing gauge',
  'llamacpp:requests_processing 1',
  '# TYPE llamacpp:requests_deferred gauge',
  'llamacpp:requests_deferred 0',
  '',
].join('\n');
const SLOTS = JSON.stringify([
  { id: 0, n_ctx: 4096, is_processing: true },
  { id: 1, n_ctx: 4096, is_processing: false },
]);

/** A fake engine: each path answers what the table says (a status and body, or a request failure). */
function engine(routes: Record<string, HttpAnswer | 'connect' | 'timeout'>): { get: HttpGet; asked: string[] } {
  const asked: string[] = [];
  const get: HttpGet = async (url) => {
    const path = new URL(url).pathname;
    asked.push(path);
    const route = routes[path] ?? { status: 404, body: '' };
    if (route === 'connect' || route === 'timeout') throw new ScrapeRequestError(route, `${path}: ${route}`);
    return route;
  };
  return { get, asked };
}

const ok = (body = ''): HttpAnswer => ({ status: 200, body });

describe('scrapeBackend', () => {
  it('reads a healthy vLLM engine', async () => {
    const { get } = engine({ '/health': ok(), '/metrics': ok(VLLM_TEXT) });
    const outcome = await scrapeBackend({ url: 'http://e:8000/', engine: null }, { get, parse: parseEngineMetrics });
    expect(outcome).toMatchObject({
      healthPassed: true,
      failure: null,
      metrics: { engine: 'vllm', running: 2, waiting: 1, kvUsage: 0.5 },
    });
  });

  it('counts a 503 health answer as loading and another non-200 as a health status failure, keeping the figures', async () => {
    const loading = await scrapeBackend(
      { url: 'http://e', engine: null },
      {
        get: engine({ '/health': { status: 503, body: '' }, '/metrics': ok(VLLM_TEXT) }).get,
        parse: parseEngineMetrics,
      },
    );
    expect(loading).toMatchObject({ healthPassed: false, failure: 'loading', metrics: { running: 2 } });
    const broken = await scrapeBackend(
      { url: 'http://e', engine: null },
      {
        get: engine({ '/health': { status: 500, body: '' }, '/metrics': ok(VLLM_TEXT) }).get,
        parse: parseEngineMetrics,
      },
    );
    expect(broken).toMatchObject({ healthPassed: false, failure: 'health_status' });
  });

  it('reports connection failures and timeouts of the health probe first', async () => {
    const refused = await scrapeBackend(
      { url: 'http://e', engine: null },
      { get: engine({ '/health': 'connect', '/metrics': 'connect' }).get, parse: parseEngineMetrics },
    );
    expect(refused).toEqual({ healthPassed: false, failure: 'connect', metrics: null });
    const slow = await scrapeBackend(
      { url: 'http://e', engine: null },
      { get: engine({ '/health': 'timeout', '/metrics': ok(VLLM_TEXT) }).get, parse: parseEngineMetrics },
    );
    expect(slow).toMatchObject({ healthPassed: false, failure: 'timeout' });
  });

  it('passes the health probe but leaves the figures unknown when /metrics fails or is no engine exposition', async () => {
    const missing = await scrapeBackend(
      { url: 'http://e', engine: null },
      { get: engine({ '/health': ok() }).get, parse: parseEngineMetrics },
    );
    expect(missing).toEqual({ healthPassed: true, failure: 'metrics_status', metrics: null });
    const foreign = await scrapeBackend(
      { url: 'http://e', engine: null },
      {
        get: engine({ '/health': ok(), '/metrics': ok('process_cpu_seconds_total 1\n') }).get,
        parse: parseEngineMetrics,
      },
    );
    expect(foreign).toEqual({ healthPassed: true, failure: 'unreadable', metrics: null });
  });

  it('reads /slots of a llama.cpp engine: after /metrics when it was not known, alongside when it was', async () => {
    const unknown = engine({ '/health': ok('{"status":"ok"}'), '/metrics': ok(LLAMACPP_TEXT), '/slots': ok(SLOTS) });
    const first = await scrapeBackend(
      { url: 'http://e', engine: null },
      { get: unknown.get, parse: parseEngineMetrics },
    );
    expect(first).toMatchObject({
      healthPassed: true,
      failure: null,
      metrics: { engine: 'llamacpp', running: 1, kvCapacityTokens: 8192 },
    });
    expect(unknown.asked).toEqual(['/health', '/metrics', '/slots']);

    const known = engine({ '/health': ok('{"status":"ok"}'), '/metrics': ok(LLAMACPP_TEXT), '/slots': 'timeout' });
    const next = await scrapeBackend(
      { url: 'http://e', engine: 'llamacpp' },
      { get: known.get, parse: parseEngineMetrics },
    );
    // A /slots failure costs only the capacity.
    expect(next).toMatchObject({
      healthPassed: true,
      failure: null,
      metrics: { engine: 'llamacpp', running: 1, kvCapacityTokens: null },
    });
    expect(known.asked.sort()).toEqual(['/health', '/metrics', '/slots']);
  });
});
