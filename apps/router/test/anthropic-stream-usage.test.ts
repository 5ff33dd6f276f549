import Anthropic from '@anthropic-ai/sdk';
import { startLoopbackServer, type LoopbackServer } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * An Anthropic stream as Anthropic's API first framed it: the prompt's usage only in `message_start`
 * (`input_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`), `message_delta` with only
 * `output_tokens`, and a body longer than the router keeps of a response's end. The learn stage must
 * still see the cached tokens (proxy/response-tail.ts keeps the stream's start for this). A fake engine
 * on loopback writes it in awkward chunks; the official SDK reads it through the router.
 */
const CACHE_READ = 2048;
const DELTAS = 400;

function anthropicApiStream(): string {
  const events = [
    [
      'message_start',
      {
        type: 'message_start',
        message: {
          id: 'msg_1',
          type: 'message',
          role: 'assistant',
          content: [],
          model: 'm',
          stop_reason: null,
          stop_sequence: null,
          usage: {
            input_tokens: 12,
            cache_read_input_tokens: CACHE_READ,
            cache_creation_input_tokens: 0,
            output_tokens: 1,
          },
        },
      },
    ],
    ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
    ['ping', { type: 'ping' }],
    ...Array.from(
      { length: DELTAS },
      () =>
        [
          'content_block_delta',
          { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' word' } },
        ] as const,
    ),
    ['content_block_stop', { type: 'content_block_stop', index: 0 }],
    [
      'message_delta',
      {
        type: 'message_delta',
        delta: { stop_reason: 'end_turn', stop_sequence: null },
        usage: { output_tokens: DELTAS },
      },
    ],
    ['message_stop', { type: 'message_stop' }],
  ] as const;
  return events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join('');
}

describe('Anthropic stream usage from message_start (message_delta with output_tokens only)', () => {
  let engine: LoopbackServer;
  let router: RouterServer;
  let routerUrl: string;
  beforeAll(async () => {
    engine = await startLoopbackServer((request, response) => {
      request.resume();
      request.on('end', () => {
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        const bytes = Buffer.from(anthropicApiStream());
        // Awkward chunks: 37 bytes at first (message_start split many times), then 1 KB.
        let at = 0;
        const next = (): void => {
          if (at >= bytes.length) return void response.end();
          const size = at < 1024 ? 37 : 1024;
          response.write(bytes.subarray(at, at + size));
          at += size;
          setImmediate(next);
        };
        next();
      });
    });
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url: engine.url, id: 'fake', models: ['m'] }],
        policy: 'prefixaware',
      }),
      { logger: false },
    );
    routerUrl = await router.listen();
  });
  afterAll(async () => {
    await router?.close();
    await engine?.close();
  });

  it("reads the cached tokens of message_start and the generated tokens of message_delta; the client gets the engine's stream", async () => {
    const client = new Anthropic({ baseURL: routerUrl, apiKey: 'unused', maxRetries: 0 });
    const message = await client.messages
      .stream({ model: 'm', max_tokens: DELTAS, messages: [{ role: 'user', content: 'Go on.' }] })
      .finalMessage();
    expect(message.content[0]).toMatchObject({ type: 'text', text: ' word'.repeat(DELTAS) });
    expect(message.usage.cache_read_input_tokens).toBe(CACHE_READ);
    expect(Buffer.byteLength(anthropicApiStream())).toBeGreaterThan(4 * 4096);
    let metrics = '';
    await waitFor(async () => {
      metrics = await (await fetch(`${router.opsUrl}/metrics`)).text();
      return /kvroute_router_prefix_predictions_total\{[^}]*\} 1/.test(metrics);
    });
    expect(metrics).toMatch(
      new RegExp(`kvroute_router_prefix_observed_cached_tokens_total\\{backend="fake"\\} ${CACHE_READ}\\b`),
    );
    expect(metrics).not.toContain('outcome="unverified"');
  });
});
