import { describe, expect, it } from 'vitest';
import { startLocalSims, stopLocalSims } from './local-sims';

describe('startLocalSims', () => {
  it('starts real vllm-sim processes on free ports and stops them', async () => {
    const sims = await startLocalSims(2, ['--profile', 'fast', '--model', 'm']);
    try {
      expect(new Set(sims.map((sim) => sim.url)).size).toBe(2);
      for (const sim of sims) {
        const models = (await (await fetch(`${sim.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
        expect(models.data[0]?.id).toBe('m');
      }
    } finally {
      await stopLocalSims(sims);
    }
    expect(sims.every((sim) => sim.process.exitCode !== null || sim.process.signalCode !== null)).toBe(true);
  });
});
