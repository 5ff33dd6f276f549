import { Gauge, type Registry } from 'prom-client';
import { buildInfo } from '../build-info';

/**
 * `kvroute_build_info{version,commit} 1` in `registry`: the same series in every kvroute app's
 * registry (Prometheus' `job` tells the apps apart), so a dashboard or an alert can see which build
 * runs where, and a rollout's progress.
 */
export function registerBuildInfoGauge(registry: Registry): void {
  const build = buildInfo();
  new Gauge({
    name: 'kvroute_build_info',
    help: 'Always 1; its labels say which kvroute build this process runs (the same in every kvroute app: job tells them apart).',
    labelNames: ['version', 'commit'],
    registers: [registry],
  }).set({ version: build.version, commit: build.commit }, 1);
}
