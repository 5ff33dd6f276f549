import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminRequest } from './admin-requests';
import { chat as chatOnce } from './chat-requests';
import { startTestCluster, type TestCluster } from './start-test-cluster';

/**
 * The admin API's backend set without Redis: one router replica, whose changes apply to itself only, at once.
 * (shared-backend-set.test.ts has the set shared through Redis; its propagation bounds make it a file that runs
 * alone, which nothing here needs: these tests assert no time.)
 */
const TOKEN = 'test-admin-token-0123456789';
const MODEL = 'test-model';

const chat = (baseUrl: string) => chatOnce(baseUrl, MODEL);

describe('admin API without Redis', () => {
  let cluster: TestCluster;
  let adminUrl: string;
  const admin = (method: string, path: string, body?: unknown) =>
    adminRequest(adminUrl, method, path, { token: TOKEN, body });
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 2, router: { adminToken: TOKEN, policy: 'roundrobin' } });
    adminUrl = cluster.adminUrl as string;
  });
  afterAll(() => cluster.close());

  it('applies changes to this replica only, at once', async () => {
    const [first, second] = cluster.sims as [TestCluster['sims'][number], TestCluster['sims'][number]];
    const listed = await admin('GET', '/admin/backends');
    expect(listed.body).toMatchObject({ source: 'local', version: null });
    expect((await admin('POST', `/admin/backends/${first.id}/drain`)).status).toBe(200);
    for (let index = 0; index < 4; index++) expect((await chat(cluster.routerUrl)).backend).toBe(second.id);
    expect((await admin('POST', `/admin/backends/${second.id}/drain`)).status).toBe(200);
    // Every backend of the model drained: the model exists but has nowhere to go.
    const nowhere = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }),
    });
    expect(nowhere.status).toBe(503);
    expect(((await nowhere.json()) as any).error.code).toBe('ROUTER_ERR_NO_BACKEND');
    expect((await admin('DELETE', `/admin/backends/${first.id}`)).status).toBe(200);
    expect(
      (await admin('POST', '/admin/backends', { url: first.url, id: 'first-again', models: [MODEL] })).status,
    ).toBe(201);
    expect((await admin('POST', `/admin/backends/${second.id}/undrain`)).status).toBe(200);
    const served = new Set<string | null>();
    for (let index = 0; index < 4; index++) served.add((await chat(cluster.routerUrl)).backend);
    expect([...served].sort()).toEqual(['first-again', second.id].sort());
  });

  it('is off unless adminToken is set', async () => {
    const plain = await startTestCluster({ backends: 1 });
    try {
      expect(plain.adminUrl).toBeNull();
      // With no admin listener, the public port is asked: it has no /admin.
      const response = await adminRequest(plain.routerUrl, 'GET', '/admin/backends', { token: TOKEN });
      expect(response.status).toBe(404);
      expect(response.body.error.code).toBe('ROUTER_ERR_NOT_FOUND');
    } finally {
      await plain.close();
    }
  });
});
