import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the fake backend received, as it arrived. */
export interface ReceivedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
  /** Set once the router's side of the request went away before an answer (its connection closed). */
  abortedBeforeAnswer: boolean;
}

/**
 * A Responses API backend on loopback for what vllm-sim cannot be made to do: answer a create with a
 * fixed, vLLM-shaped stored response (its id first, as vLLM's body has it), refuse with a chosen
 * status and `Retry-After`, or take a stored response's GET/DELETE/cancel and never answer it (or fail
 * it with a 500). It records every request (headers, body) and whether the router abandoned it. Give it
 * to the router with `models` in its backend entry (no discovery call is needed).
 */
export class FakeResponsesBackend {
  url = '';
  readonly received: ReceivedRequest[] = [];
  /** What `POST /v1/responses` gets: a stored response, or this status with `Retry-After`. */
  create: { kind: 'store' } | { kind: 'refuse'; status: number; retryAfter: string } = { kind: 'store' };
  /** What a stored response's GET/DELETE/cancel gets: `hang` takes it and never answers; `fail` answers 500. */
  stored: 'answer' | 'hang' | 'fail' = 'answer';
  private created = 0;
  private readonly server: Server = createServer((incoming, response) => this.answer(incoming, response));

  async start(): Promise<this> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The requests received with this method whose path starts with `prefix`. */
  requests(method: string, prefix: string): ReceivedRequest[] {
    return this.received.filter((request) => request.method === method && request.url.startsWith(prefix));
  }

  private answer(incoming: IncomingMessage, response: ServerResponse): void {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const received: ReceivedRequest = {
        method: incoming.method ?? '',
        url: incoming.url ?? '',
        headers: incoming.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        abortedBeforeAnswer: false,
      };
      this.received.push(received);
      response.on('close', () => {
        if (!response.writableEnded) received.abortedBeforeAnswer = true;
      });
      const path = received.url.split('?')[0] ?? '';
      if (received.method === 'GET' && path === '/v1/models')
        return json(response, 200, { object: 'list', data: [{ id: 'test-model', object: 'model' }] });
      if (received.method === 'POST' && path === '/v1/responses') return this.answerCreate(response);
      if (path.startsWith('/v1/responses/')) {
        if (this.stored === 'hang') return;
        if (this.stored === 'fail')
          return json(response, 500, { error: { message: 'Engine failure (fake backend).', type: 'server_error' } });
        return json(response, 200, {
          id: path.split('/')[3],
          object: 'response',
          status: 'completed',
          model: 'test-model',
          output: [],
        });
      }
      return json(response, 404, { error: { message: 'not found', type: 'invalid_request_error' } });
    });
  }

  private answerCreate(response: ServerResponse): void {
    if (this.create.kind === 'refuse') {
      response.setHeader('retry-after', this.create.retryAfter);
      return json(response, this.create.status, {
        error: { message: 'The engine is busy (fake backend).', type: 'rate_limit_error', code: this.create.status },
      });
    }
    this.created += 1;
    const id = `resp_${String(this.created).padStart(32, '0')}`;
    json(response, 200, {
      id,
      object: 'response',
      created_at: 1_761_204_418,
      status: 'completed',
      model: 'test-model',
      output: [
        {
          type: 'message',
          id: `msg_${this.created}`,
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: 'ok', annotations: [] }],
        },
      ],
      usage: {
        input_tokens: 4,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 1,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 5,
      },
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function json(response: ServerResponse, status: number, body: unknown): void {
  const bytes = Buffer.from(JSON.stringify(body));
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': String(bytes.length) });
  response.end(bytes);
}
