import { describe, expect, it } from 'vitest';
import { predictionDelta, predictionTotalsOf, runPredictionTotals, sumPredictionTotals } from './router-predictions';
import { createClientAgent } from './request-client';
import { createServer } from 'node:http';
import type { PredictionTotals } from '../report';
import { bytesPerTokenLine } from './run-scenario';

/** What prom-client writes for the router's prediction counters (apps/router/src/router-metrics.ts), two backends. */
const ROUTER_METRICS = `# HELP kvroute_router_prefix_predictions_total Responses whose engine-reported cached tokens were checked.
# TYPE kvroute_router_prefix_predictions_total counter
kvroute_router_prefix_predictions_total{backend="127.0.0.1:8001",outcome="confirmed"} 7
kvroute_router_prefix_predictions_total{backend="127.0.0.1:8001",outcome="unverified"} 1
kvroute_router_prefix_predictions_total{backend="127.0.0.1:8002",outcome="overpredicted"} 2
kvroute_router_prefix_predictions_total{backend="127.0.0.1:8002",outcome="confirmed"} 3

# HELP kvroute_router_prefix_predicted_tokens_total Prompt tokens the router predicted.
# TYPE kvroute_router_prefix_predicted_tokens_total counter
kvroute_router_prefix_predicted_tokens_total{backend="127.0.0.1:8001"} 1200
kvroute_router_prefix_predicted_tokens_total{backend="127.0.0.1:8002"} 800

# HELP kvroute_router_prefix_observed_cached_tokens_total Prompt tokens the backends reported.
# TYPE kvroute_router_prefix_observed_cached_tokens_total counter
kvroute_router_prefix_observed_cached_tokens_total{backend="127.0.0.1:8001"} 1500
kvroute_router_prefix_observed_cached_tokens_total{backend="127.0.0.1:8002"} 500

# HELP kvroute_router_prefix_confirmed_tokens_total min(predicted, observed).
# TYPE kvroute_router_prefix_confirmed_tokens_total counter
kvroute_router_prefix_confirmed_tokens_total{backend="127.0.0.1:8001"} 1100
kvroute_router_prefix_confirmed_tokens_total{backend="127.0.0.1:8002"} 500
kvroute_router_requests_total{backend="127.0.0.1:8001",odd="a}b \\"c\\""} 99
`;

describe('router prediction counters', () => {
  it('sums over backends, by outcome for the predictions', () => {
    expect(predictionTotalsOf(ROUTER_METRICS)).toEqual({
      predictedTokens: 2000,
      observedTokens: 2000,
      confirmedTokens: 1600,
      predictions: { confirmed: 10, unverified: 1, overpredicted: 2 },
    });
  });

  it('is zeros for a router that declares the counters and has counted nothing, and nothing for one that does not declare them', () => {
    expect(
      predictionTotalsOf(
        '# HELP kvroute_router_prefix_predictions_total x\n# TYPE kvroute_router_prefix_predictions_total counter\n',
      ),
    ).toEqual({ predictedTokens: 0, observedTokens: 0, confirmedTokens: 0, predictions: {} });
    expect(predictionTotalsOf('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n')).toBeNull();
  });

  it('takes deltas per router (a counter gone down counts from zero) and sums replicas', () => {
    const before = {
      predictedTokens: 500,
      observedTokens: 400,
      confirmedTokens: 300,
      predictions: { confirmed: 4, unverified: 1 },
    };
    const after = predictionTotalsOf(ROUTER_METRICS)!;
    expect(predictionDelta(before, after)).toEqual({
      predictedTokens: 1500,
      observedTokens: 1600,
      confirmedTokens: 1300,
      predictions: { confirmed: 6, unverified: 0, overpredicted: 2 },
    });
    expect(predictionDelta({ ...before, predictedTokens: 5000 }, after).predictedTokens).toBe(2000);
    expect(predictionDelta(null, after)).toEqual(after);
    expect(sumPredictionTotals([after, before])).toEqual({
      predictedTokens: 2500,
      observedTokens: 2400,
      confirmedTokens: 1900,
      predictions: { confirmed: 14, unverified: 2, overpredicted: 2 },
    });
  });

  it('scrapes every replica, leaves out what is not a kvroute router, and waits for the last responses to be counted', async () => {
    let scrapes = 0;
    const router = createServer((_request, response) => {
      scrapes++;
      // The last response is counted only from the third scrape on.
      response.end(
        scrapes < 3 ? ROUTER_METRICS.replace('outcome="confirmed"} 3', 'outcome="confirmed"} 2') : ROUTER_METRICS,
      );
    });
    const oracle = createServer((_request, response) => {
      response.writeHead(404);
      response.end('{}');
    });
    await Promise.all(
      [router, oracle].map((server) => new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))),
    );
    const urls = [router, oracle].map((server) => `http://127.0.0.1:${(server.address() as { port: number }).port}`);
    const agent = createClientAgent();
    try {
      const totals = await runPredictionTotals(agent, urls, [null, null], {
        expectedPredictions: 13,
        sleep: () => Promise.resolve(),
      });
      expect(totals?.predictions).toEqual({ confirmed: 10, unverified: 1, overpredicted: 2 });
      expect(scrapes).toBe(3);
      expect(await runPredictionTotals(agent, [urls[1]!], [null], { expectedPredictions: 1 })).toBeUndefined();
    } finally {
      await agent.close();
      await Promise.all([router, oracle].map((server) => new Promise((resolve) => server.close(resolve))));
    }
  });
});

describe('the learned bytes per token', () => {
  it('is read from the cost-model gauge (mean over pools), kept as the end value by the delta, averaged over replicas', () => {
    const text = [
      '# TYPE kvroute_router_prefix_predictions_total counter',
      'kvroute_router_prefix_predictions_total{backend="a",outcome="confirmed"} 3',
      'kvroute_router_cost_model_learned{pool="m1",figure="bytes_per_token"} 2',
      'kvroute_router_cost_model_learned{pool="m2",figure="bytes_per_token"} 4',
      'kvroute_router_cost_model_learned{pool="m1",figure="prefill_seconds_per_token"} 0.0001',
    ].join('\n');
    const totals = predictionTotalsOf(text);
    expect(totals?.learnedBytesPerToken).toBe(3);
    const delta = predictionDelta(
      { predictedTokens: 0, observedTokens: 0, confirmedTokens: 0, predictions: {}, learnedBytesPerToken: 9 },
      totals as PredictionTotals,
    );
    expect(delta.learnedBytesPerToken).toBe(3);
    expect(sumPredictionTotals([delta, { ...delta, learnedBytesPerToken: 5 }]).learnedBytesPerToken).toBe(4);
    expect(predictionTotalsOf(text.split('\n').slice(0, 2).join('\n'))?.learnedBytesPerToken).toBeUndefined();
  });

  it("is held against the prompts' text bytes over the engines' prompt tokens", () => {
    const line = bytesPerTokenLine(2.2, [
      { promptTokens: 1000, promptTextBytes: 2000 },
      { promptTokens: 0, promptTextBytes: 500 },
      { promptTokens: 1000, promptTextBytes: 2000 },
    ]);
    expect(line).toBe("bytes per token: learned 2.200, the prompts' 2.000 (+10.0 %)");
  });
});
