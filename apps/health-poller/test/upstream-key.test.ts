import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startLoopbackServer, type LoopbackServer } from '@kvroute/testing';
import { openTestEnv, startSim, stateOf, waitForValue, type TestEnv, type TestSim } from './poller-test-kit';

/**
 * A backend behind an API key (as an engine or a gateway guarding /metrics and /health with one): a
 * node:http server on loopback in front of a vllm-sim that answers 401 without `Authorization: Bearer
 * <key>` and relays to the sim with it, recording what each request carried. The poller must scrape it
 * with the key it is configured with, and publish it healthy.
 */
const KEY = 'scrape-key-0123456789abcdef';
const POLLER = {
  intervalMs: 300,
  scrapeTimeoutMs: 200,
  jobLockMs: 2000,
  stalledCheckMs: 2000,
  reconcileMs: 1000,
  backendSetPollMs: 200,
};

class KeyGuard {
  readonly authorizations: Array<string | undefined> = [];
  private server: LoopbackServer | null = null;

  constructor(private readonly sim: TestSim) {}

  get url(): string {
    if (this.server === null) throw new Error('not started');
    return this.server.url;
  }

  async start(): Promise<this> {
    this.server = await startLoopbackServer((request, response) => void this.answer(request, response));
    return this;
  }

  close(): Promise<void> {
    return this.server?.close() ?? Promise.resolve();
  }

  private async answer(request: IncomingMessage, response: ServerResponse): Promise<void> {
    this.authorizations.push(request.headers.authorization);
    if (request.headers.authorization !== `Bearer ${KEY}`) {
      response.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"message":"Unauthorized"}}');
      return;
    }
    const upstream = await fetch(`${this.sim.url}${request.url ?? '/'}`);
    response
      .writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'text/plain' })
      .end(await upstream.text());
  }
}

let env: TestEnv;
let sim: TestSim;
let guard: KeyGuard;
const tempDir = mkdtempSync(join(tmpdir(), 'kvroute-poller-key-'));
beforeAll(async () => {
  env = await openTestEnv();
  sim = await startSim();
});
beforeEach(async (context) => {
  env.beginTest(context.task.name.slice(0, 20));
  guard = await new KeyGuard(sim).start();
});
afterEach(async () => {
  await env.closePollers();
  await guard.close();
});
afterAll(async () => {
  await sim.sim.close();
  await env.close();
  rmSync(tempDir, { recursive: true, force: true });
});

describe('health poller against a backend that requires an API key', () => {
  it('scrapes with the backend key from a file and publishes it healthy', async () => {
    const keyFile = join(tempDir, 'backend.key');
    writeFileSync(keyFile, `${KEY}\n`, { mode: 0o600 });
    await env.startPoller({ ...POLLER, backends: [{ url: guard.url, apiKeyFile: keyFile }] });
    const { value } = await waitForValue(
      stateOf(env, new URL(guard.url).host),
      (state) => state?.healthy === true && state.failure === null,
    );
    expect(value).toMatchObject({ running: 0, engine: 'vllm' });
    expect(guard.authorizations.length).toBeGreaterThanOrEqual(2);
    expect(guard.authorizations.every((authorization) => authorization === `Bearer ${KEY}`)).toBe(true);
  });

  it('scrapes with the fleet key from the environment', async () => {
    await env.startPoller(
      { ...POLLER, backends: [guard.url], upstreamApiKeyEnv: 'POLLER_TEST_KEY' },
      { env: { POLLER_TEST_KEY: KEY } },
    );
    await waitForValue(
      stateOf(env, new URL(guard.url).host),
      (state) => state?.healthy === true && state.failure === null,
    );
    expect(guard.authorizations.every((authorization) => authorization === `Bearer ${KEY}`)).toBe(true);
  });

  it('without the key its scrapes fail (what the key fixes)', async () => {
    await env.startPoller({ ...POLLER, backends: [guard.url], failuresToUnhealthy: 1 });
    const { value } = await waitForValue(
      stateOf(env, new URL(guard.url).host),
      (state) => state !== null && state.failure !== null,
    );
    expect(value?.failure).toBe('health_status');
    expect(guard.authorizations.every((authorization) => authorization === undefined)).toBe(true);
  });
});
