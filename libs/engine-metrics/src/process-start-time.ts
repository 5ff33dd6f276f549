import type { SeriesReader } from './series-reader';

/**
 * Python prometheus_client's process collector, as an engine's `/metrics` prints it when it serves the
 * default registry (vLLM V1 with one API server: `process_start_time_seconds 1.76120439123e+09`, unix
 * seconds at 10 ms resolution, no labels). Multiprocess registries (vLLM V0's frontend, SGLang, vLLM
 * with several API servers) and llama.cpp have no process metrics.
 */
export const PROCESS_METRIC_NAMES = {
  startTime: 'process_start_time_seconds',
} as const;

/**
 * When the engine's process started, ms since the Unix epoch (rounded), or null when it is not printed
 * (or not a positive finite number). Several series (one exposition merged from several processes)
 * read as the newest: a restart of any of them moves it.
 */
export function engineStartedAtMs(series: SeriesReader): number | null {
  let newest: number | null = null;
  for (const { value } of series.samples(PROCESS_METRIC_NAMES.startTime)) {
    if (Number.isFinite(value) && value > 0 && (newest === null || value > newest)) newest = value;
  }
  return newest === null ? null : Math.round(newest * 1000);
}
