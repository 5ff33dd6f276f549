import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { percentile } from '@kvroute/workloads';
export { syntheticTokenPrompt as tokenPrompt } from '@kvroute/workloads';
import { SimConfig } from '../src/config';
import { createSimServer, type SimServer } from '../src/create-sim';

export interface TestSim {
  readonly url: string;
  readonly sim: SimServer;
  close(): Promise<void>;
}

/** A real simulated backend on a free loopback port, built from the same config schema as main.ts. */
export async function startTestSim(overrides: Partial<SimConfig> = {}): Promise<TestSim> {
  const config = SimConfig.parse({ port: 0, model: 'test-model', ...overrides });
  const sim = await createSimServer(config);
  const url = await sim.listen();
  return { url, sim, close: () => sim.close() };
}

export interface MetricFamily {
  name: string;
  help: string;
  type: string;
  metrics: Array<{
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
  }>;
}

export async function scrapeMetrics(url: string): Promise<Map<string, MetricFamily>> {
  const response = await fetch(`${url}/metrics`);
  const families = parsePrometheusTextFormat(await response.text()) as MetricFamily[];
  return new Map(families.map((family) => [family.name, family]));
}

/** Value of the first sample of a counter or gauge family. */
export function sampleValue(families: Map<string, MetricFamily>, name: string): number {
  const family = families.get(name);
  if (!family) throw new Error(`metric ${name} missing`);
  return Number(family.metrics[0]?.value);
}

/**
 * `_sum` and `_count` of a histogram, read from the raw text: the parser package drops them for
 * labelled histograms, and vLLM's always carry labels.
 */
export async function histogramTotals(url: string, name: string): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const read = (suffix: string): number => {
    const line = text
      .split('\n')
      .find((candidate) => candidate.startsWith(`${name}${suffix}{`) || candidate.startsWith(`${name}${suffix} `));
    if (!line) throw new Error(`${name}${suffix} missing`);
    return Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  return { sum: read('_sum'), count: read('_count') };
}

export interface StreamResult {
  readonly status: number;
  /** Wall milliseconds from sending to the first event that carries generated text. */
  readonly ttftMs: number;
  readonly events: string[];
}

/** POSTs a streaming request and reads the SSE events as they come, timing the first content. */
export async function postStream(url: string, path: string, body: object): Promise<StreamResult> {
  const started = performance.now();
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  const events: string[] = [];
  let ttftMs = Number.NaN;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let boundary = buffer.indexOf('\n\n');
    while (boundary !== -1) {
      const event = buffer.slice(0, boundary);
      buffer = buffer.slice(boundary + 2);
      events.push(event);
      if (Number.isNaN(ttftMs) && /"(text|content)":"[^"]/.test(event)) ttftMs = performance.now() - started;
      boundary = buffer.indexOf('\n\n');
    }
  }
  return { status: response.status, ttftMs, events };
}

export async function postJson(url: string, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}
