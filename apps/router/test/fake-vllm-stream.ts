import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fake vLLM for the stream-usage tests: fixed, vLLM-shaped stream bytes with and without
 * `stream_options.include_usage`, written in awkward pieces, and what it was sent.
 */

export const FINGERPRINT = 'vllm-0.19.1-8c3e1f0a';

/** vLLM-shaped stream bytes with and without include_usage (vllm chat_completion/serving.py, completion/serving.py). */
export function vllmStream(kind: 'chat' | 'text', eol: string): { withUsage: string; without: string } {
  const head =
    kind === 'chat'
      ? '{"id":"chatcmpl-9a1b","object":"chat.completion.chunk","created":1761204418,"model":"m"'
      : '{"id":"cmpl-9a1b","object":"text_completion","created":1761204418,"model":"m"';
  const event = (json: string): string => `data: ${json}${eol}${eol}`;
  const delta = (text: string): string =>
    kind === 'chat'
      ? `${head},"choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null,"token_ids":null}]}`
      : `${head},"choices":[{"index":0,"text":${JSON.stringify(text)},"logprobs":null,"finish_reason":null,` +
        `"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}`;
  const terminal = (stamp: boolean): string => {
    const tail = stamp ? `,"system_fingerprint":"${FINGERPRINT}"` : '';
    return kind === 'chat'
      ? `${head},"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]${tail}}`
      : `${head},"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,` +
          `"prompt_token_ids":null,"token_ids":null}]${tail}}`;
  };
  const opening =
    kind === 'chat'
      ? [
          event(
            `${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null}`,
          ),
        ]
      : [];
  const deltas = ['The', ' "choices":[] of', ' a \\"usage\\" é ✓', ' day'].map((text) => event(delta(text)));
  const usage = event(
    `${head},"choices":[],"usage":{"prompt_tokens":40,"total_tokens":44,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":32}},` +
      `"system_fingerprint":"${FINGERPRINT}"}`,
  );
  const done = event('[DONE]');
  return {
    withUsage: [...opening, ...deltas, event(terminal(false)), usage, done].join(''),
    without: [...opening, ...deltas, event(terminal(true)), done].join(''),
  };
}

/**
 * A fake vLLM: answers each request with `vllmStream(...)`, the include_usage variant when the body asked
 * for it, written in pieces cut at `cuts` (byte offsets), each flushed and followed by a pause so that
 * the router reads it as a chunk of its own.
 */
export class FakeVllm {
  readonly bodies: string[] = [];
  url = '';
  private readonly server: Server = createServer((incoming: IncomingMessage, response: ServerResponse) =>
    this.answer(incoming, response),
  );

  constructor(
    private readonly eol: string,
    private readonly cutsOf: (length: number) => readonly number[],
  ) {}

  async start(): Promise<this> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  private answer(incoming: IncomingMessage, response: ServerResponse): void {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      this.bodies.push(body);
      const parsed = JSON.parse(body) as { stream_options?: { include_usage?: boolean } | null };
      const stream = vllmStream(incoming.url?.includes('chat') ? 'chat' : 'text', this.eol);
      const bytes = Buffer.from(parsed.stream_options?.include_usage === true ? stream.withUsage : stream.without);
      response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      const cuts = [...this.cutsOf(bytes.length), bytes.length];
      const writeFrom = (index: number, from: number): void => {
        if (index === cuts.length) return void response.end();
        const to = cuts[index] as number;
        response.write(bytes.subarray(from, to), () => setTimeout(() => writeFrom(index + 1, to), 3));
      };
      writeFrom(0, 0);
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Cuts that land inside line endings, inside the usage event and between events, so several events share a piece. */
export function awkwardCuts(eol: string): (length: number) => readonly number[] {
  return (length) => {
    const cuts = new Set<number>();
    for (let at = 7; at < length; at += eol === '\r\n' ? 173 : 149) cuts.add(at);
    return [...cuts].sort((a, b) => a - b);
  };
}

/** POSTs `body` as JSON; the whole answer. */
export async function post(
  url: string,
  path: string,
  body: string,
): Promise<{ status: number; text: string; headers: Headers }> {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  return { status: response.status, text: await response.text(), headers: response.headers };
}

/** The request bodies of the stream-usage tests: a chat and a text completion, streamed. */
export const CHAT = {
  model: 'm',
  messages: [{ role: 'user', content: 'Tell me about the day' }],
  max_tokens: 4,
  stream: true,
};
export const TEXT = { model: 'm', prompt: 'Once upon a time', max_tokens: 4, stream: true };
