import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the fake engine received, as it arrived. */
export interface EngineRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

/** A model as the fake engine lists it; `parent`: an adapter's base model (vLLM lists LoRAs so). */
export interface FakeModel {
  readonly id: string;
  readonly parent?: string;
}

/** Answers a request itself (true) or leaves it to the default answer (false). */
export type EngineRoute = (request: EngineRequest, response: ServerResponse) => boolean;

/**
 * An OpenAI-compatible engine on loopback for what vllm-sim does not do (LoRA adapters in its model list,
 * files and batches, a stored response of a given id): `GET /v1/models` lists `models`; every other
 * request is offered to `routes` in turn, else answered 200 with a small completion naming its path and
 * model, with usage. Every request is recorded.
 */
export class FakeEngine {
  url = '';
  readonly received: EngineRequest[] = [];
  readonly routes: EngineRoute[] = [];
  private readonly server: Server = createServer((incoming, response) => this.answer(incoming, response));

  constructor(readonly models: readonly FakeModel[]) {}

  async start(): Promise<this> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** The requests received with this method whose path starts with `prefix`. */
  requests(method: string, prefix: string): EngineRequest[] {
    return this.received.filter((request) => request.method === method && request.url.startsWith(prefix));
  }

  private answer(incoming: IncomingMessage, response: ServerResponse): void {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const request: EngineRequest = {
        method: incoming.method ?? '',
        url: incoming.url ?? '',
        headers: incoming.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      if (request.method === 'GET' && request.url === '/v1/models') {
        const data = this.models.map((model) => ({
          id: model.id,
          object: 'model',
          owned_by: 'vllm',
          root: model.id,
          parent: model.parent ?? null,
        }));
        return json(response, 200, { object: 'list', data });
      }
      this.received.push(request);
      for (const route of this.routes) if (route(request, response)) return;
      let model: unknown = null;
      try {
        model = (JSON.parse(request.body) as { model?: unknown }).model ?? null;
      } catch {
        // not JSON: no model
      }
      json(response, 200, {
        id: 'cmpl-fake',
        object: 'chat.completion',
        model,
        path: request.url,
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
      });
    });
  }
}

export function json(response: ServerResponse, status: number, body: unknown): true {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  response.end(text);
  return true;
}
