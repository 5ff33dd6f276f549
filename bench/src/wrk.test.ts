import { describe, expect, it } from 'vitest';
import {
  errorCount,
  pacingDelayMs,
  parseWrkOutput,
  requestRate,
  wrkCommand,
  WRK_CHAT_SCRIPT,
  type WrkRun,
} from './wrk';

const SAMPLE = [
  'Running 3s test @ http://127.0.0.1:1/v1/chat/completions',
  '  1 threads and 50 connections',
  'Requests/sec:    490.12',
  'WRK_JSON {"durationUs":3001000,"requests":1470,"bytes":1003000,"errors":{"connect":0,"read":1,' +
    '"write":0,"status":2,"timeout":0},"latencyUs":{"min":500,"mean":1800.5,"stdev":900.1,"max":9000,' +
    '"p50":1600,"p90":2800,"p99":5400,"p999":8900}}',
  '',
].join('\n');

describe('pacingDelayMs', () => {
  it('spaces each connection connections/rate seconds apart, in ms', () => {
    expect(pacingDelayMs(500, 50)).toBe(100);
    expect(pacingDelayMs(500, 10)).toBe(20);
    expect(pacingDelayMs(2000, 1)).toBe(0.5);
  });

  it('rejects a rate or connection count that cannot pace', () => {
    expect(() => pacingDelayMs(0, 10)).toThrow(/rate/);
    expect(() => pacingDelayMs(Number.NaN, 10)).toThrow(/rate/);
    expect(() => pacingDelayMs(500, 0)).toThrow(/connections/);
    expect(() => pacingDelayMs(500, 2.5)).toThrow(/connections/);
  });
});

describe('parseWrkOutput', () => {
  it("reads the done() hook's line among wrk's own output", () => {
    const result = parseWrkOutput(SAMPLE);
    expect(result.requests).toBe(1470);
    expect(result.latencyUs.p99).toBe(5400);
    expect(result.latencyUs.mean).toBe(1800.5);
    expect(errorCount(result.errors)).toBe(3);
    expect(requestRate(result)).toBeCloseTo(1470 / 3.001, 6);
  });

  it('fails when the line is missing or incomplete', () => {
    expect(() => parseWrkOutput('Requests/sec: 1\n')).toThrow(/WRK_JSON/);
    expect(() => parseWrkOutput('WRK_JSON {"durationUs":1,"requests":1,"bytes":1,"errors":{},"latencyUs":{}}')).toThrow(
      /errors.connect/,
    );
    expect(() => parseWrkOutput('WRK_JSON {"durationUs":"1"}')).toThrow();
  });
});

describe('wrkCommand', () => {
  const run: WrkRun = {
    url: 'http://127.0.0.1:9/v1/chat/completions',
    workload: { model: 'm', promptBytes: 100, maxTokens: 16, stream: true },
    connections: 50,
    seconds: 3,
    rate: 500,
    runId: 7,
  };

  it('passes the workload and the pacing to the Lua script through the environment', () => {
    const { command, args, env } = wrkCommand(run);
    expect(command).toBe('wrk');
    expect(args).toEqual(['-t1', '-c50', '-d3s', '--timeout', '5s', '-s', WRK_CHAT_SCRIPT, run.url]);
    expect(env).toEqual({
      BENCH_MODEL: 'm',
      BENCH_PROMPT_BYTES: '100',
      BENCH_MAX_TOKENS: '16',
      BENCH_STREAM: '1',
      BENCH_DELAY_MS: '100.000',
      BENCH_RUN_ID: '7',
    });
  });

  it('runs closed loop without a rate, and under taskset when pinned', () => {
    const { rate: _rate, ...unpaced } = run;
    const { command, args, env } = wrkCommand({ ...unpaced, core: 1 });
    expect(env.BENCH_DELAY_MS).toBe('0');
    expect(command).toBe('taskset');
    expect(args.slice(0, 3)).toEqual(['-c', '1', 'wrk']);
  });
});
