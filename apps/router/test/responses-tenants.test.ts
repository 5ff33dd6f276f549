import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../src/tenants/api-key';
import { startTestCluster, type TestCluster } from './start-test-cluster';

/**
 * Responses API with tenants: the response-owner map is per cache scope (a tenant's, or its team's),
 * so one tenant can neither fetch, delete nor continue another's stored response through the router,
 * and an id unknown in the caller's scope is refused by the router, never prefix-routed to an engine
 * (engines keep responses with no notion of tenant).
 */
const keys = { a: generateApiKey(), b: generateApiKey(), teamOne: generateApiKey(), teamTwo: generateApiKey() };

describe('Responses API with tenants', () => {
  let cluster: TestCluster;
  let dir: string;
  const clientOf = (key: string): OpenAI => new OpenAI({ apiKey: key, baseURL: `${cluster.routerUrl}/v1`, maxRetries: 0 });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvroute-keys-'));
    const file = join(dir, 'keys.yaml');
    const entry = (id: string, tenant: string, digest: string): string => `  - id: ${id}\n    tenant: ${tenant}\n    sha256: ${digest}\n`;
    writeFileSync(
      file,
      ['keys:', entry('a', 'tenant-a', keys.a.digest), entry('b', 'tenant-b', keys.b.digest), entry('one', 'tenant-c', keys.teamOne.digest), entry('two', 'tenant-d', keys.teamTwo.digest)].join('\n'),
    );
    cluster = await startTestCluster({
      backends: 1,
      router: {
        auth: 'api-keys',
        apiKeysFile: file,
        cacheSaltSecret: 'test-cache-salt-secret-0123456789',
        tenants: [
          { id: 'tenant-c', team: 'research' },
          { id: 'tenant-d', team: 'research' },
        ],
      },
    });
  });

  afterAll(async () => {
    await cluster?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("a tenant cannot fetch, delete or continue another tenant's response, even on the one backend that holds it", async () => {
    const owner = clientOf(keys.a.secret);
    const other = clientOf(keys.b.secret);
    const created = await owner.responses.create({ model: 'test-model', input: 'private notes', max_output_tokens: 3 });
    const notFound = { status: 404, error: { code: 'ROUTER_ERR_RESPONSE_NOT_FOUND' } };
    await expect(other.responses.retrieve(created.id)).rejects.toMatchObject(notFound);
    await expect(other.responses.delete(created.id)).rejects.toMatchObject(notFound);
    // One backend: a prefix-routed guess would reach the engine that holds it; the router refuses instead.
    await expect(other.responses.create({ model: 'test-model', previous_response_id: created.id, input: 'tell me' })).rejects.toMatchObject({ ...notFound, error: { param: 'previous_response_id' } });
    // Still there for its owner.
    expect((await owner.responses.retrieve(created.id)).id).toBe(created.id);
    const next = await owner.responses.create({ model: 'test-model', previous_response_id: created.id, input: 'more', max_output_tokens: 2 });
    expect(next.previous_response_id).toBe(created.id);
  });

  it("tenants of one team share their responses, as they share the team's cache", async () => {
    const created = await clientOf(keys.teamOne.secret).responses.create({ model: 'test-model', input: 'team notes', max_output_tokens: 2 });
    const next = await clientOf(keys.teamTwo.secret).responses.create({ model: 'test-model', previous_response_id: created.id, input: 'and?', max_output_tokens: 2 });
    expect(next.previous_response_id).toBe(created.id);
  });
});
