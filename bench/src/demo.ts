/**
 * `npm run demo`: what kvroute is for, live, on simulated backends.
 *
 * Starts four vllm-sim backends (Qwen2.5-7B on A100 profile, real time) and, for each of several
 * policies, a kvroute router in front of them; replays the same multi-turn chat workload through each
 * (caches reset in between). Each conversation opens with its own ~5k-token document after a shared
 * system prompt, so a turn that lands on a backend that never saw the conversation pays the whole
 * prefill again. Prints TTFT, cache hits and how often a conversation changed backend, per policy.
 */
import { parseArgs } from 'node:util';
import { SseParser, SSE_DONE } from '@kvroute/protocols';
import { mean, percentile } from '@kvroute/workloads';
import { startLocalRouter, startLocalSims, stopLocalProcess, stopLocalSims } from './local-sims';

const { values: args } = parseArgs({
  options: {
    backends: { type: 'string', default: '4' },
    sessions: { type: 'string', default: '8' },
    turns: { type: 'string', default: '6' },
    'time-scale': { type: 'string', default: '1' },
    policies: { type: 'string', default: 'roundrobin,leastloaded,prefixaware,cacheaware' },
  },
});
const backendCount = Number(args.backends);
const sessions = Number(args.sessions);
const turns = Number(args.turns);

interface TurnResult {
  session: number;
  ttftMs: number;
  promptTokens: number;
  cachedTokens: number;
  backend: string;
}

async function main(): Promise<void> {
  const policies = args.policies.split(',');
  console.log(`Starting ${backendCount} vllm-sim backends (a100-7b, time-scale ${args['time-scale']})…`);
  const sims = await startLocalSims(backendCount, ['--profile', 'a100-7b', '--model', 'demo-model', '--time-scale', args['time-scale']]);
  try {
    const rows: string[] = [];
    for (const policy of policies) {
      await Promise.all(sims.map((sim) => fetch(`${sim.url}/sim/reset-cache`, { method: 'POST' })));
      const router = await startLocalRouter(
        sims.map((sim) => sim.url),
        ['--policy', policy],
      );
      process.stdout.write(`\nkvroute --policy ${policy}: ${sessions} conversations × ${turns} turns `);
      try {
        const results = await runWorkload(router.url);
        const ttfts = results.map((result) => result.ttftMs);
        const cached = results.reduce((sum, result) => sum + result.cachedTokens, 0);
        const prompt = results.reduce((sum, result) => sum + result.promptTokens, 0);
        rows.push(
          `| ${policy} | ${results.length} | ${percentile(ttfts, 50).toFixed(0)} ms | ${percentile(ttfts, 95).toFixed(0)} ms | ${mean(ttfts).toFixed(0)} ms | ${((100 * cached) / prompt).toFixed(1)} % | ${backendSwitches(results)} |`,
        );
      } finally {
        await stopLocalProcess(router);
      }
    }
    console.log('\n\n| policy | requests | TTFT p50 | TTFT p95 | TTFT mean | prompt tokens from cache | conversation moved to another backend |');
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    for (const row of rows) console.log(row);
    console.log('\nTTFT is measured by this client through the router on streaming responses (first content token).');
  } finally {
    await stopLocalSims(sims);
  }
}

/** Times a conversation's turn went to a different backend than its previous turn. */
function backendSwitches(results: readonly TurnResult[]): number {
  const last = new Map<number, string>();
  let switches = 0;
  for (const result of results) {
    const previous = last.get(result.session);
    if (previous !== undefined && previous !== result.backend) switches++;
    last.set(result.session, result.backend);
  }
  return switches;
}

async function runWorkload(routerUrl: string): Promise<TurnResult[]> {
  const results: TurnResult[] = [];
  const systemPrompt = `You are the support assistant of ACME Routers. Policies follow. ${'Answer precisely, cite the manual, never guess. '.repeat(60)}`;
  await Promise.all(
    Array.from({ length: sessions }, async (_, session) => {
      await sleep(session * 50);
      const messages: Array<{ role: string; content: string }> = [
        { role: 'system', content: systemPrompt },
        { role: 'user', content: `Conversation ${session}. Here is my configuration file:\n${configurationDocument(session)}` },
      ];
      for (let turn = 0; turn < turns; turn++) {
        const result = await streamChat(routerUrl, messages);
        results.push({ ...result, session });
        process.stdout.write('.');
        messages.push({ role: 'assistant', content: result.answer }, { role: 'user', content: `Follow-up ${turn + 1}: and what about timeouts in section ${turn + 3}?` });
        await sleep(40);
      }
    }),
  );
  return results;
}

async function streamChat(url: string, messages: ReadonlyArray<{ role: string; content: string }>): Promise<Omit<TurnResult, 'session'> & { answer: string }> {
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo-model', messages, max_tokens: 32, stream: true, stream_options: { include_usage: true } }),
  });
  let ttftMs = Number.NaN;
  let answer = '';
  let usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } | null } | undefined;
  const parser = new SseParser();
  const decoder = new TextDecoder();
  for await (const bytes of response.body as unknown as AsyncIterable<Uint8Array>) {
    for (const data of parser.push(decoder.decode(bytes, { stream: true }))) {
      if (data === SSE_DONE) continue;
      const chunk = JSON.parse(data);
      const content: string | undefined = chunk.choices?.[0]?.delta?.content;
      if (content) {
        if (Number.isNaN(ttftMs)) ttftMs = performance.now() - started;
        answer += content;
      }
      if (chunk.usage) usage = chunk.usage;
    }
  }
  return {
    ttftMs,
    answer,
    promptTokens: usage?.prompt_tokens ?? 0,
    cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
    backend: response.headers.get('x-router-backend') ?? '',
  };
}

/** A distinct ~5k-token document per conversation (deterministic). */
function configurationDocument(session: number): string {
  const lines: string[] = [];
  for (let line = 0; line < 220; line++) {
    lines.push(`backend-${session}-${line}: url=http://10.0.${session}.${line % 250}:8000 weight=${(line * 7 + session) % 13} timeout_ms=${1000 + line * 3}`);
  }
  return lines.join('\n');
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
