import { parsePrometheusText, type PrometheusSample } from '@kvroute/engine-metrics';

/**
 * What the admission benchmark reads of the routers' own /metrics (each URL: a router's ops listener): how many requests wait in flow
 * control's queue on each replica, and how many admitted requests waited longer than the deadline.
 */
async function samplesOf(routerUrl: string): Promise<readonly PrometheusSample[]> {
  const response = await fetch(`${routerUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`${routerUrl}/metrics answered ${response.status}`);
  return parsePrometheusText(await response.text()).samples;
}

const sumOf = (samples: readonly PrometheusSample[], name: string, match = (_: PrometheusSample) => true): number =>
  samples.filter((sample) => sample.name === name && match(sample)).reduce((sum, sample) => sum + sample.value, 0);

/** Requests queued on each replica now (all models); a replica that does not answer counts 0. */
export async function scrapeFlowGauges(routerUrls: readonly string[]): Promise<{ queuedRequests: number }[]> {
  return Promise.all(
    routerUrls.map(async (url) => {
      const samples = await samplesOf(url).catch(() => []);
      return { queuedRequests: sumOf(samples, 'kvroute_router_flow_queued_requests') };
    }),
  );
}

/**
 * Admitted requests, over every replica, whose queue wait exceeded `deadlineSeconds` (which must be
 * one of the histogram's bucket bounds, or the count includes the waits up to the next bound above).
 */
export async function queueWaitsPast(routerUrls: readonly string[], deadlineSeconds: number): Promise<number> {
  let past = 0;
  for (const url of routerUrls) {
    const samples = await samplesOf(url);
    const count = sumOf(samples, 'kvroute_router_flow_queue_wait_seconds_count');
    const buckets = samples.filter((sample) => sample.name === 'kvroute_router_flow_queue_wait_seconds_bucket');
    const bounds = [...new Set(buckets.map((sample) => Number(sample.labels['le'])))].filter(
      (bound) => bound >= deadlineSeconds - 1e-9,
    );
    const within = bounds.length === 0 ? Number.POSITIVE_INFINITY : Math.min(...bounds);
    past +=
      count - sumOf(samples, 'kvroute_router_flow_queue_wait_seconds_bucket', (s) => Number(s.labels['le']) === within);
  }
  return past;
}

/** Requests shed so far over every replica, by reason (queue-full, predicted-wait, deadline). */
export async function shedByReason(routerUrls: readonly string[]): Promise<Map<string, number>> {
  const byReason = new Map<string, number>();
  for (const url of routerUrls) {
    const samples = await samplesOf(url).catch(() => []);
    for (const sample of samples) {
      if (sample.name !== 'kvroute_router_flow_shed_total') continue;
      const reason = sample.labels['reason'] ?? 'unknown';
      byReason.set(reason, (byReason.get(reason) ?? 0) + sample.value);
    }
  }
  return byReason;
}
