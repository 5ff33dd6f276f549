import { describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor } from './start-test-cluster';

/**
 * An in-flight slot is released exactly once on every path: a burst of mixed traffic (streams,
 * non-streams, client aborts mid-stream and before the first byte, retried 503s, hung backends timed
 * out (504, not retried), mid-stream upstream failures, bad input) leaves the count at 0, with nothing running upstream.
 */
describe('in-flight accounting under mixed traffic', () => {
  it('returns to 0 after every kind of ending', async () => {
    const cluster = await startTestCluster({
      sims: [{}, { profile: 'a100-7b', timeScale: 5 }, {}, {}],
      router: {
        policy: 'roundrobin',
        streamFirstByteTimeoutMs: 400,
        generationTimeoutMs: 400,
        breakerFailureThreshold: 1000,
      },
    });
    try {
      const [, , erroring, flaky] = cluster.sims;
      const setFaults = (url: string, faults: object) =>
        fetch(`${url}/sim/faults`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(faults),
        });
      await setFaults(erroring?.url as string, { errorRate: 0.5, errorStatus: 503, hangRate: 0.3 });
      await setFaults(flaky?.url as string, { dropStreamRate: 0.5 });

      let peak = 0;
      const sampler = setInterval(() => (peak = Math.max(peak, totalInflight(cluster.router))), 5);
      const request = async (index: number): Promise<string> => {
        const kind = index % 5;
        const stream = kind !== 0;
        const controller = new AbortController();
        if (kind === 3) setTimeout(() => controller.abort(), 5 + (index % 7) * 10);
        const body =
          kind === 4
            ? '{"model": "test-model", "messages": ['
            : JSON.stringify({
                model: 'test-model',
                messages: [{ role: 'user', content: `m${index}` }],
                max_tokens: 30,
                stream,
              });
        try {
          const response = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body,
            signal: controller.signal,
          });
          await response.text();
          return String(response.status);
        } catch (error) {
          return (error as Error).name;
        }
      };
      const outcomes = await Promise.all(Array.from({ length: 120 }, (_, index) => request(index)));
      clearInterval(sampler);
      await waitFor(() => totalInflight(cluster.router) === 0, 5_000);
      await waitFor(
        () => cluster.sims.every((sim) => sim.sim.engine.runningCount === 0 && sim.sim.engine.waitingCount === 0),
        5_000,
      );
      expect(peak).toBeGreaterThan(0);
      expect(outcomes).toContain('200');
      expect(outcomes).toContain('400');
      expect(outcomes).toContain('AbortError');
      // Hung requests hit their deadline (504, not retried): their leases were released too.
      expect(outcomes).toContain('504');
      // Client aborts reached the backends as aborts (the upstream request was cancelled, not left running).
      const upstreamAborts = cluster.sims.reduce((sum, sim) => sum + sim.sim.engine.stats.requestSuccess.abort, 0);
      expect(upstreamAborts).toBeGreaterThan(0);
    } finally {
      // Nothing in flight by now (or the test failed already): no grace to wait out the idle connections (a second).
      await cluster.close({ graceMs: 0 });
    }
  });
});
