import { describe, expect, it } from 'vitest';
import { startLocalSims, stopLocalSims } from './local-sims';
import { HAPROXY_PATH, haproxyVersion, startHaproxyProcess } from './proxy-processes';

/** System test (`npm run test:system`): needs HAProxy, which that command installs. */
describe('HAProxy in front of a real vllm-sim', () => {
  const body = JSON.stringify({
    model: 'm',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 4,
    stream: true,
  });

  async function streamThrough(url: string): Promise<string> {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(response.status).toBe(200);
    return response.text();
  }

  it('relays SSE through HAProxy', async () => {
    expect(haproxyVersion(), `${HAPROXY_PATH} does not run: install haproxy (npm run test:system does)`).toBeDefined();
    const [sim] = await startLocalSims(1, ['--profile', 'fast', '--model', 'm']);
    if (!sim) throw new Error('no sim');
    const haproxy = await startHaproxyProcess(sim.url);
    try {
      expect(await streamThrough(haproxy.url)).toContain('data: [DONE]');
    } finally {
      await haproxy.stop();
      await stopLocalSims([sim]);
    }
  });
});
