import { createServer, type IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { runWrk, type WrkRun } from './wrk';

/** System test (`npm run test:system`): needs wrk, which that command installs. */
describe('chat-completions.lua under the real wrk', () => {
  async function capture(
    run: Omit<WrkRun, 'url'>,
  ): Promise<{ bodies: string[]; requests: IncomingMessage[]; result: Awaited<ReturnType<typeof runWrk>> }> {
    const bodies: string[] = [];
    const requests: IncomingMessage[] = [];
    const server = createServer((request, response) => {
      let body = '';
      request.setEncoding('utf8');
      request.on('data', (chunk: string) => (body += chunk));
      request.on('end', () => {
        bodies.push(body);
        requests.push(request);
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end('{"choices":[]}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      const result = await runWrk({ ...run, url: `http://127.0.0.1:${port}/v1/chat/completions` });
      return { bodies, requests, result };
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  }

  it('sends valid chat bodies, a different prompt of exactly the asked size each time, paced to the rate', async () => {
    const { bodies, requests, result } = await capture({
      workload: { model: 'bench-model', promptBytes: 100, maxTokens: 16, stream: false },
      connections: 4,
      seconds: 1,
      rate: 100,
      runId: 3,
    });
    expect(result.errors).toEqual({ connect: 0, read: 0, write: 0, status: 0, timeout: 0 });
    // 4 connections × one request per ~40 ms (±50 %) over 1 s: ~100, never the thousands of a closed loop.
    expect(result.requests).toBeGreaterThan(50);
    expect(result.requests).toBeLessThan(140);
    expect(requests[0]?.method).toBe('POST');
    expect(requests[0]?.url).toBe('/v1/chat/completions');
    expect(requests[0]?.headers['content-type']).toBe('application/json');
    const parsed = bodies.map(
      (body) =>
        JSON.parse(body) as {
          model: string;
          max_tokens: number;
          stream: boolean;
          messages: Array<{ role: string; content: string }>;
        },
    );
    for (const body of parsed) {
      expect(body).toMatchObject({ model: 'bench-model', max_tokens: 16, stream: false });
      expect(body.messages[0]?.role).toBe('user');
      expect(body.messages[0]?.content).toHaveLength(100);
      expect(body.messages[0]?.content).toMatch(/^r3t1n\d{9} /);
    }
    const prompts = parsed.map((body) => body.messages[0]?.content);
    expect(new Set(prompts).size).toBe(prompts.length);
  });

  it('streams 32 KB prompts closed loop when no rate is given', async () => {
    const { bodies, result } = await capture({
      workload: { model: 'm', promptBytes: 32 * 1024, maxTokens: 8, stream: true },
      connections: 2,
      seconds: 1,
      runId: 4,
    });
    expect(result.requests).toBeGreaterThan(200);
    const body = JSON.parse(bodies[0] ?? '') as {
      stream: boolean;
      max_tokens: number;
      messages: Array<{ content: string }>;
    };
    expect(body.stream).toBe(true);
    expect(body.max_tokens).toBe(8);
    expect(body.messages[0]?.content).toHaveLength(32 * 1024);
  });
});
