import { describe, expect, it } from 'vitest';
import { startTestCluster, TEST_ADMIN_TOKEN, totalInflight } from './start-test-cluster';

/** `/debug/route` explains the decision a real request would get, and changes nothing. */
describe('POST /debug/route', () => {
  it('names the backend a real request then goes to, with scores, and takes no lease', async () => {
    const cluster = await startTestCluster({ backends: 3, router: { debugRoutes: true } });
    try {
      const body = {
        model: 'test-model',
        messages: [{ role: 'user', content: `explain ${'the routing of this prompt '.repeat(40)}` }],
        max_tokens: 4,
      };
      const post = (path: string) =>
        fetch(`${cluster.routerUrl}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      // A first request records the prompt's blocks on its backend.
      const first = await post('/v1/chat/completions');
      await first.text();
      const home = first.headers.get('x-router-backend');
      const explained = (await (await cluster.debugRoute(JSON.stringify(body))).json()) as {
        policy: string;
        decision: {
          kind: string;
          backendId: string;
          reason: string;
          scores: { backendId: string; matchBlocks: number }[];
        };
      };
      expect(explained.policy).toBe('cacheaware');
      expect(explained.decision).toMatchObject({ kind: 'routed', backendId: home, reason: 'prefix-affinity' });
      expect(explained.decision.scores).toHaveLength(3);
      expect(explained.decision.scores.find((score) => score.backendId === home)?.matchBlocks).toBeGreaterThan(0);
      expect(totalInflight(cluster.router)).toBe(0);
      const second = await post('/v1/chat/completions');
      await second.text();
      expect(second.headers.get('x-router-backend')).toBe(explained.decision.backendId);
    } finally {
      await cluster.close();
    }
  });

  it('explains an Anthropic Messages body on its own routing text (system included); ?endpoint= picks the parse, an unknown one is a 400', async () => {
    const cluster = await startTestCluster({ backends: 3, router: { debugRoutes: true } });
    try {
      const system = `You are agent 7. ${'Follow the house rules for every change. '.repeat(40)}`;
      const body = {
        model: 'test-model',
        max_tokens: 4,
        system,
        messages: [{ role: 'user', content: 'What changed?' }],
      };
      const sent = await fetch(`${cluster.routerUrl}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify(body),
      });
      await sent.text();
      expect(sent.status).toBe(200);
      const home = sent.headers.get('x-router-backend');
      type Explained = {
        textBytes: number;
        decision: { backendId: string; scores: { backendId: string; matchBlocks: number }[] };
      };
      // Guessed from the body (`system` beside `messages`) and asked for: the same answer.
      for (const path of ['', '?endpoint=messages']) {
        const explained = (await (
          await fetch(`${cluster.adminUrl}/debug/route${path}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_ADMIN_TOKEN}` },
            body: JSON.stringify(body),
          })
        ).json()) as Explained;
        expect(explained.decision.backendId, path).toBe(home);
        // The system prompt is the shared head: matched on the backend that served it.
        expect(explained.decision.scores.find((score) => score.backendId === home)?.matchBlocks, path).toBeGreaterThan(
          0,
        );
        expect(explained.textBytes, path).toBeGreaterThan(system.length);
      }
      const unknown = await fetch(`${cluster.adminUrl}/debug/route?endpoint=embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_ADMIN_TOKEN}` },
        body: JSON.stringify(body),
      });
      expect(unknown.status).toBe(400);
      expect(((await unknown.json()) as { error: { code: string; param: string } }).error).toMatchObject({
        code: 'ROUTER_ERR_INVALID_REQUEST',
        param: 'endpoint',
      });
      expect(totalInflight(cluster.router)).toBe(0);
    } finally {
      await cluster.close();
    }
  });

  it('answers a body that is no JSON object with a 400 in the OpenAI shape', async () => {
    const cluster = await startTestCluster({ backends: 1, router: { debugRoutes: true } });
    try {
      for (const body of ['42', '"text"', 'true', 'null', '[]']) {
        const response = await cluster.debugRoute(body);
        expect(response.status, body).toBe(400);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_INVALID_REQUEST');
      }
    } finally {
      await cluster.close();
    }
  });

  it('is served on the admin listener only, behind the admin token', async () => {
    const cluster = await startTestCluster({ backends: 1, router: { debugRoutes: true } });
    try {
      const body = JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }] });
      expect(new URL(cluster.adminUrl as string).port).not.toBe(new URL(cluster.routerUrl).port);
      const onPublic = await fetch(`${cluster.routerUrl}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_ADMIN_TOKEN}` },
        body,
      });
      expect(onPublic.status).toBe(404);
      expect(((await onPublic.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_NOT_FOUND');
      const noToken = await fetch(`${cluster.adminUrl}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(noToken.status).toBe(401);
      expect(((await noToken.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_UNAUTHORIZED');
      expect((await cluster.debugRoute(body)).status).toBe(200);
    } finally {
      await cluster.close();
    }
  });
});
