import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stopLocalProcess } from '../local-sims';
import { startOracleProcess } from './oracle-process';

/** The oracle router as the local cluster starts it: its own process (main.ts), flags from the caller. */
describe('startOracleProcess', () => {
  let sim: SimServer;
  let simUrl: string;
  beforeAll(async () => {
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
    simUrl = await sim.listen();
  });
  afterAll(() => sim?.close());

  it('starts a ready oracle router over the given backends and stops on SIGTERM', async () => {
    const oracle = await startOracleProcess([simUrl], ['--match-timeout-ms', '1000']);
    try {
      const response = await fetch(`${oracle.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', prompt: 'hello', max_tokens: 2 }),
      });
      expect(response.status).toBe(200);
      expect(response.headers.get('x-router-backend')).toBe(new URL(simUrl).host);
      expect(response.headers.get('x-router-reason')).toBe('least-loaded');
      await response.text();
    } finally {
      await stopLocalProcess(oracle);
    }
    expect(oracle.process.signalCode ?? oracle.process.exitCode).not.toBeNull();
  });

  it("runs oracle-cost with cacheaware's keys as flags", async () => {
    const oracle = await startOracleProcess(
      [simUrl],
      ['--rule', 'oracle-cost', '--prefill-ms-per-token', '0.1', '--spread-abs', '4', '--block-size-bytes', '128'],
    );
    try {
      const response = await fetch(`${oracle.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', prompt: 'hello', max_tokens: 2 }),
      });
      expect(response.status).toBe(200);
      // A cold prompt on the only backend: cacheaware's reason, not the oracle's.
      expect(response.headers.get('x-router-reason')).toBe('least-loaded');
      await response.text();
      const state = (await (await fetch(`${oracle.url}/oracle/state`)).json()) as { rule: string };
      expect(state.rule).toBe('oracle-cost');
    } finally {
      await stopLocalProcess(oracle);
    }
  });

  it('fails fast, naming the exit, on a configuration it rejects', async () => {
    await expect(startOracleProcess([simUrl], ['--match-timeout-ms', 'soon'])).rejects.toThrow(
      /exited \(2\) before it was ready/,
    );
    await expect(startOracleProcess([simUrl], ['--rule', 'oracle-cost', '--spread-rel', '0.5'])).rejects.toThrow(
      /exited \(2\) before it was ready/,
    );
  });
});
