import { duplicateKeysIn, startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMain, type MainProcess } from './main-process';

/**
 * The log lines of the router, the health poller and the simulator as their own main.ts writes them
 * (issue 31): one JSON object per line with each key once (Elasticsearch refuses a document with a
 * repeated key, and JSON.parse would hide it: the text is checked), `--log-format pretty` for people,
 * and the router's one info line per request (`--log-requests`), with no prompt and no credential.
 */
const MODEL = 'test-model';
const SECRET_PROMPT = 'the launch code of project Heron is 7731';
const SECRET_TOKEN = 'sk-client-credential-4411';

/** The `url` of an app's "listening"/"running" line. */
function urlOf(line: string): string {
  return (JSON.parse(line) as { url: string }).url;
}

async function chat(routerUrl: string, stream: boolean): Promise<Response> {
  const response = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${SECRET_TOKEN}` },
    body: JSON.stringify({ model: MODEL, stream, max_tokens: 4, messages: [{ role: 'user', content: SECRET_PROMPT }] }),
  });
  await response.arrayBuffer();
  return response;
}

const isRequestLine = (line: string): boolean => line.includes('"msg":"request"');

describe('log lines of the router, poller and sim (JSON)', () => {
  let redis: TestRedis;
  const started: MainProcess[] = [];
  let sim: MainProcess;
  let poller: MainProcess;
  let router: MainProcess;
  let quiet: MainProcess;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    sim = startMain('sim', ['--port', '0', '--model', MODEL, '--log-level', 'debug']);
    started.push(sim);
    const simUrl = urlOf(await sim.waitForLine((line) => line.includes('vllm-sim listening')));
    poller = startMain('poller', [
      ...['--host', '127.0.0.1', '--port', '0', '--redis-url', redis.url, '--backends', simUrl],
      ...['--interval-ms', '500', '--scrape-timeout-ms', '400', '--log-level', 'debug'],
    ]);
    started.push(poller);
    const routerArgs = [
      ...['--host', '127.0.0.1', '--port', '0', '--ops-port', '0', '--backends', simUrl, '--redis-url', redis.url],
      ...['--shutdown-drain-delay-ms', '0'],
    ];
    router = startMain('router', [...routerArgs, '--log-level', 'debug']);
    quiet = startMain('router', [...routerArgs, '--no-log-requests']);
    started.push(router, quiet);
    await poller.waitForLine((line) => line.includes('kvroute health poller running'));
    const routerUrl = urlOf(await router.waitForLine((line) => line.includes('kvroute router listening')));
    const quietUrl = urlOf(await quiet.waitForLine((line) => line.includes('kvroute router listening')));
    expect((await chat(routerUrl, false)).status).toBe(200);
    expect((await chat(routerUrl, true)).status).toBe(200);
    expect((await chat(quietUrl, false)).status).toBe(200);
    await waitForCount(router, isRequestLine, 2);
    await Promise.all(started.map((process) => process.stop()));
  }, 90_000);

  afterAll(async () => {
    await Promise.all(started.map((process) => process.stop()));
    await redis?.stop();
  });

  it('writes each line as one JSON object with every key once (one `component`)', () => {
    for (const [name, process] of Object.entries({ sim, poller, router, quiet })) {
      expect(process.lines.length, name).toBeGreaterThan(0);
      for (const line of process.lines) {
        expect(duplicateKeysIn(line), `${name}: ${line}`).toEqual([]);
        expect(JSON.parse(line), `${name}: ${line}`).toHaveProperty('msg');
      }
    }
    // The stages' children and the HTTP server's each name their own component, once.
    const components = new Set(router.lines.map((line) => (JSON.parse(line) as { component?: string }).component));
    expect(components).toContain('route');
    expect(components).toContain('requests');
  });

  it('logs one info line per request: id, model, backend, reason, status, TTFT; no prompt, no credential', () => {
    const requests = router.lines.filter(isRequestLine).map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(requests).toHaveLength(2);
    for (const request of requests) {
      expect(request).toMatchObject({
        level: 'info',
        component: 'requests',
        model: MODEL,
        reason: expect.any(String),
        tries: 1,
        status: 200,
      });
      expect(request['requestId']).toEqual(expect.any(String));
      expect(request['backend']).toEqual(expect.stringContaining('127.0.0.1'));
      expect(request['durationMs']).toEqual(expect.any(Number));
    }
    const [whole, streamed] = requests;
    expect(whole).toMatchObject({ stream: false, ttftMs: null });
    expect(streamed).toMatchObject({ stream: true, ttftMs: expect.any(Number) });
    // The debug "routing decision" line of the same request shares its id.
    const decision = router.lines.find((line) => line.includes('"routing decision"'));
    expect(JSON.parse(decision as string)).toMatchObject({ requestId: whole?.['requestId'] });
    for (const process of [sim, poller, router, quiet]) {
      const output = process.lines.join('\n');
      expect(output).not.toContain('Heron');
      expect(output).not.toContain(SECRET_TOKEN);
    }
  });

  it('writes no request line with --no-log-requests', () => {
    expect(quiet.lines.some((line) => line.includes('kvroute router listening'))).toBe(true);
    expect(quiet.lines.filter(isRequestLine)).toEqual([]);
  });
});

describe('--log-format pretty', () => {
  const started: MainProcess[] = [];
  let redis: TestRedis;

  afterAll(async () => {
    await Promise.all(started.map((process) => process.stop()));
    await redis?.stop();
  });

  it('writes lines for people on the router, the poller and the sim', async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    const pretty = /^\d{2}:\d{2}:\d{2}\.\d{3} INFO  [\w-]+(\/[\w-]+)?: /;
    const sim = startMain('sim', ['--port', '0', '--model', MODEL, '--log-format', 'pretty']);
    started.push(sim);
    const simLine = await sim.waitForLine((line) => line.includes('vllm-sim listening'));
    expect(simLine).toMatch(pretty);
    const simUrl = /url="([^"]+)"/.exec(simLine)?.[1] as string;
    const router = startMain('router', [
      ...['--host', '127.0.0.1', '--port', '0', '--ops-port', '0', '--backends', simUrl],
      ...['--log-format', 'pretty', '--shutdown-drain-delay-ms', '0'],
    ]);
    const poller = startMain('poller', [
      ...['--host', '127.0.0.1', '--port', '0', '--redis-url', redis.url, '--backends', simUrl],
      ...['--log-format', 'pretty'],
    ]);
    started.push(router, poller);
    expect(await router.waitForLine((line) => line.includes('kvroute router listening'))).toMatch(
      /^\d{2}:\d{2}:\d{2}\.\d{3} INFO  kvroute-router: kvroute router listening {2}url="http:\/\/127\.0\.0\.1:\d+"/,
    );
    expect(await poller.waitForLine((line) => line.includes('kvroute health poller running'))).toMatch(pretty);
  }, 60_000);
});

async function waitForCount(process: MainProcess, matches: (line: string) => boolean, count: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (process.lines.filter(matches).length < count) {
    if (Date.now() > deadline) throw new Error(`fewer than ${count} matching lines:\n${process.lines.join('\n')}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
