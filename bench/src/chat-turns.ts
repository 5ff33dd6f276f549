import { eventCarriesOutput, SSE_DONE, SseParser } from '@kvroute/protocols';
import { type Agent, request } from 'undici';
import type { LocalSim } from './local-sims';

/**
 * A streamed chat turn as a benchmark's client sees it (bench:pd, bench:lora): its time to first token, the gaps
 * between its content events, the text (sent back as the next turn's context) and the response's headers.
 */
export interface StreamedTurn {
  readonly ok: boolean;
  /** ms from sending to the first content event. */
  readonly ttftMs: number;
  /** Gaps between consecutive content events, ms. */
  readonly gapsMs: readonly number[];
  readonly outputTokens: number;
  readonly text: string;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

const FAILED: StreamedTurn = { ok: false, ttftMs: 0, gapsMs: [], outputTokens: 0, text: '', headers: {} };

/** POSTs `body` (with `stream: true`) to `<url>/v1/chat/completions` and reads the stream to its end. */
export async function streamChatTurn(agent: Agent, url: string, body: object): Promise<StreamedTurn> {
  const started = performance.now();
  try {
    const response = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
    });
    if (response.statusCode !== 200) {
      await response.body.text();
      return { ...FAILED, headers: response.headers };
    }
    const parser = new SseParser();
    const decoder = new TextDecoder();
    let text = '';
    let ttftMs = Number.NaN;
    let last = 0;
    const gapsMs: number[] = [];
    let outputTokens = 0;
    for await (const bytes of response.body) {
      for (const data of parser.push(decoder.decode(bytes as Uint8Array, { stream: true }))) {
        if (data === SSE_DONE || !eventCarriesOutput({ data })) continue;
        const now = performance.now();
        if (Number.isNaN(ttftMs)) ttftMs = now - started;
        else gapsMs.push(now - last);
        last = now;
        outputTokens++;
        text +=
          (JSON.parse(data) as { choices: Array<{ delta?: { content?: string } }> }).choices[0]?.delta?.content ?? '';
      }
    }
    return { ok: !Number.isNaN(ttftMs), ttftMs, gapsMs, outputTokens, text, headers: response.headers };
  } catch {
    return FAILED;
  }
}

/** Sums a counter's series (every label set) over `sims`' `/metrics`. */
export async function sumSimCounter(sims: readonly LocalSim[], name: string): Promise<number> {
  let total = 0;
  for (const sim of sims) {
    const text = await (await fetch(`${sim.url}/metrics`)).text();
    for (const line of text.split('\n'))
      if (line.startsWith(`${name}{`) || line.startsWith(`${name} `))
        total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

/** Prefix-cache hits ÷ queries over `sims` (vLLM's counters); null when there are none. */
export async function prefixHitRateOf(sims: readonly LocalSim[]): Promise<number | null> {
  if (sims.length === 0) return null;
  const hits = await sumSimCounter(sims, 'vllm:prefix_cache_hits_total');
  const queries = await sumSimCounter(sims, 'vllm:prefix_cache_queries_total');
  return queries === 0 ? 0 : hits / queries;
}
