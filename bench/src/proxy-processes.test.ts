import { describe, expect, it } from 'vitest';
import { startLocalSims, stopLocalSims } from './local-sims';
import {
  BENCH_HAPROXY_SOURCE,
  haproxyConfig,
  ROUTER_PROXY_PROTOCOL_FLAGS,
  startBareProxyProcess,
} from './proxy-processes';

describe('haproxyConfig', () => {
  it('is a one-server TCP pass-through on the given port', () => {
    const config = haproxyConfig(8123, '127.0.0.1:9000');
    expect(config).toContain('mode tcp');
    expect(config).toContain('bind 127.0.0.1:8123');
    expect(config).toContain('server sim1 127.0.0.1:9000');
    expect(config).not.toContain('mode http');
    expect(config).not.toContain('balance');
  });

  it('balances connections round-robin over several servers (router replicas)', () => {
    const config = haproxyConfig(8123, ['127.0.0.1:9001', '127.0.0.1:9002', '127.0.0.1:9003']);
    expect(config).toContain('balance roundrobin');
    expect(config.match(/^ {2}server /gm)).toHaveLength(3);
    expect(config).toContain('server sim3 127.0.0.1:9003');
    expect(config).not.toContain('send-proxy');
  });

  it('sends PROXY protocol v2 from its own address when asked (routers started with ROUTER_PROXY_PROTOCOL_FLAGS)', () => {
    const config = haproxyConfig(8123, ['127.0.0.1:9001', '127.0.0.1:9002'], { proxyProtocol: true });
    expect(config).toContain('default-server send-proxy-v2');
    expect(config).toContain(`source ${BENCH_HAPROXY_SOURCE}`);
    expect(ROUTER_PROXY_PROTOCOL_FLAGS).toEqual(['--proxy-protocol-from', BENCH_HAPROXY_SOURCE]);
  });
});

describe('proxy processes in front of a real vllm-sim', () => {
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

  // HAProxy in front of the sim: proxy-processes.system.test.ts.
  it('relays SSE through the bare proxy process', async () => {
    const [sim] = await startLocalSims(1, ['--profile', 'fast', '--model', 'm']);
    if (!sim) throw new Error('no sim');
    const bare = await startBareProxyProcess(sim.url);
    try {
      expect(await streamThrough(bare.url)).toContain('data: [DONE]');
    } finally {
      await bare.stop();
      await stopLocalSims([sim]);
    }
    expect(bare.exited()).toBeDefined();
  });
});
