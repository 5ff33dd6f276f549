import { describe, expect, it } from 'vitest';
import { prefixCounterDeltas } from './backend-truth';
import { configFlags, oracleFlags } from './local-cluster';
import { parseScenario } from './scenario';
import { ProgressBar } from './progress';
import { ANY_POLICY, parseRouterList, RemoteTarget } from './remote-target';

describe('ProgressBar', () => {
  it('redraws one line in place on a terminal', () => {
    const writes: string[] = [];
    let now = 0;
    const bar = new ProgressBar({ isTTY: true, write: (text) => void writes.push(text) }, () => now, 10);
    bar.begin('cacheaware · seed 1', 4);
    now = 65_000;
    bar.tick();
    bar.tick();
    bar.end();
    expect(writes[0]).toBe('\r\x1b[2K[··········] 0/4   0 %  cacheaware · seed 1  0:00');
    expect(writes[2]).toBe('\r\x1b[2K[#####·····] 2/4  50 %  cacheaware · seed 1  1:05');
    expect(writes.at(-1)).toBe('\n');
  });

  it('writes a line per 10 % step in a log, not one per request', () => {
    const lines: string[] = [];
    const bar = new ProgressBar({ isTTY: false, write: (text) => void lines.push(text) }, () => 0);
    bar.begin('run', 200);
    for (let index = 0; index < 200; index++) bar.tick();
    bar.end();
    expect(lines).toHaveLength(11);
    expect(lines.at(-1)).toContain('200/200 100 %');
    expect(lines.every((line) => line.endsWith('\n'))).toBe(true);
  });
});

describe('prefixCounterDeltas', () => {
  it('subtracts per backend, counts from zero after a restart, and leaves out backends without counters', () => {
    const before = [
      { backend: 'a', hits: 100, queries: 400 },
      { backend: 'b', hits: 50, queries: 60 },
      { backend: 'c', hits: null, queries: null },
    ];
    const after = [
      { backend: 'a', hits: 400, queries: 1000 },
      { backend: 'b', hits: 7, queries: 10 },
      { backend: 'c', hits: 5, queries: 9 },
    ];
    expect(prefixCounterDeltas(before, after)).toEqual([
      { backend: 'a', prefixCacheHitsDelta: 300, prefixCacheQueriesDelta: 600 },
      { backend: 'b', prefixCacheHitsDelta: 7, prefixCacheQueriesDelta: 10 },
    ]);
  });
});

describe('configFlags', () => {
  it('spells config keys as the apps’ flags', () => {
    expect(configFlags({ saturationInflight: 4, redisURL: 'redis://x', debug: true })).toEqual([
      '--saturation-inflight',
      '4',
      '--redis-url',
      'redis://x',
      '--debug=true',
    ]);
  });
});

describe('real deployment target', () => {
  it('parses plain URLs and policy=URL pairs; several URLs for one policy are its replicas', () => {
    const routers = parseRouterList(
      'cacheaware=http://a:8080/,cacheaware=http://b:8080, roundrobin=http://c:8080,http://d',
    );
    expect(Object.fromEntries(routers)).toEqual({
      cacheaware: ['http://a:8080', 'http://b:8080'],
      roundrobin: ['http://c:8080'],
      [ANY_POLICY]: ['http://d'],
    });
    expect(() => parseRouterList('cacheaware=ftp://x')).toThrow(/not URL or policy=URL/);
    expect(() => parseRouterList(' , ')).toThrow(/no router URL/);
  });

  it('runs the policies it has routers for (never the oracle), and resets vLLM caches when asked', async () => {
    const calls: string[] = [];
    const fakeFetch = (async (url: URL | string) => {
      calls.push(String(url));
      return new Response('', {
        status: String(url).endsWith('/reset_prefix_cache') && String(url).includes('b1') ? 200 : 404,
      });
    }) as typeof fetch;
    const logs: string[] = [];
    const target = new RemoteTarget({
      routers: parseRouterList('cacheaware=http://r1'),
      backendUrls: ['http://b1:8000', 'http://b2:8000'],
      resetCache: true,
      log: (line) => void logs.push(line),
      fetch: fakeFetch,
    });
    expect(target.supports('cacheaware')).toBe(true);
    expect(target.supports('roundrobin')).toBe(false);
    expect(target.supports('oracle')).toBe(false);
    expect(target.supports('oracle-cost')).toBe(false);
    expect(
      new RemoteTarget({
        routers: parseRouterList('http://r1'),
        backendUrls: [],
        resetCache: false,
        log: () => undefined,
      }).supports('oracle-cost'),
    ).toBe(false);
    expect(await target.startRun('cacheaware')).toEqual(['http://r1']);
    // A router's /metrics is on its ops listener (9464 unless --router-ops-port says otherwise).
    expect(target.metricsUrlOf('http://r1')).toBe('http://r1:9464');
    expect(
      new RemoteTarget({
        routers: parseRouterList('https://r1:8080'),
        backendUrls: [],
        resetCache: false,
        routerOpsPorts: [9100],
        log: () => undefined,
      }).metricsUrlOf('https://r1:8080'),
    ).toBe('https://r1:9100');
    // Several routers on one host: one ops port each, in --router's order.
    const perRouter = new RemoteTarget({
      routers: parseRouterList('roundrobin=http://h:9001,cacheaware=http://h:9002'),
      backendUrls: [],
      resetCache: false,
      routerOpsPorts: [9101, 9102],
      log: () => undefined,
    });
    expect(['http://h:9001', 'http://h:9002'].map((url) => perRouter.metricsUrlOf(url))).toEqual([
      'http://h:9101',
      'http://h:9102',
    ]);
    expect(
      () =>
        new RemoteTarget({
          routers: parseRouterList('http://h:9001,http://h:9002,http://h:9003'),
          backendUrls: [],
          resetCache: false,
          routerOpsPorts: [9101, 9102],
          log: () => undefined,
        }),
    ).toThrow(/2 ports for 3 routers/);
    expect(calls.sort()).toEqual([
      'http://b1:8000/reset_prefix_cache',
      'http://b2:8000/reset_prefix_cache',
      'http://b2:8000/sim/reset-cache',
    ]);
    expect(logs).toEqual([
      expect.stringContaining('not cleared between runs (pass --router-redis URL)'),
      expect.stringContaining('http://b2:8000: could not reset its prefix cache'),
    ]);
  });
});

describe('oracleFlags', () => {
  const scenario = parseScenario(
    `name: flags
cluster:
  router: { blockSizeBytes: 128, spreadAbs: 4, redisTimeoutMs: 50 }
  routerByPolicy:
    cacheaware: { prefillMsPerToken: 0.1, ownershipAt: routing }
    prefixaware: { saturationInflight: 4 }
    oracle: { matchTimeoutMs: 800 }
    oracle-cost: { matchTimeoutMs: 900, spreadAbs: 6 }
workload: { kind: sessions }
`,
    'flags',
  );

  it("gives the oracle its rule and its own keys, never the routers'", () => {
    expect(oracleFlags(scenario, 'oracle')).toEqual(['--rule', 'oracle', '--match-timeout-ms', '800']);
  });

  it("gives oracle-cost cacheaware's keys and block size as the cacheaware runs have them, its own keys last", () => {
    expect(oracleFlags(scenario, 'oracle-cost')).toEqual([
      '--rule',
      'oracle-cost',
      '--block-size-bytes',
      '128',
      '--spread-abs',
      '6',
      '--prefill-ms-per-token',
      '0.1',
      '--ownership-at',
      'routing',
      '--match-timeout-ms',
      '900',
    ]);
  });
});
