import type { LoraAdapters } from './engine-metrics';
import type { PrometheusSample } from './prometheus-text';
import type { SeriesReader } from './series-reader';

/**
 * LoRA adapter residency from vLLM's `vllm:lora_requests_info` (V1 `vllm/v1/metrics/loggers.py`, V0
 * `vllm/engine/metrics.py`): a gauge whose labels are the state and whose value is when it was set.
 *
 *   vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.789828498802105e+09
 *
 * - the value is `set_to_current_time()`: unix seconds of the engine's last stats update;
 * - `running_lora_adapters` / `waiting_lora_adapters`: comma-joined adapter **names** of the running and
 *   waiting requests (no counts; `""` when none); `max_lora`: `--max-loras`, adapters per batch;
 * - no `engine` or `model_name` label, and every label set ever seen stays exported as its own series,
 *   so the current state is the series with the **largest value** (llm-d's `getLatestMetric`);
 * - absent until the engine has served a LoRA request.
 *
 * Malformed (the field is null and `malformed` true, so the poller can count it): a series whose value is
 * NaN or ±Inf (which series is the latest can no longer be told), or a latest series without the three
 * labels, with a `max_lora` that is not a non-negative integer, with more than `LORA_MAX_NAMES` distinct
 * names in a list, or with a name longer than `LORA_MAX_NAME_CHARS`. Sizes are refused rather than cut:
 * a truncated list would state residency that is not true.
 */
export const LORA_METRIC_NAMES = {
  requestsInfo: 'vllm:lora_requests_info',
} as const;

/** At most this many distinct adapter names per list (running, waiting). */
export const LORA_MAX_NAMES = 256;
/** At most this many characters (UTF-16 code units) per adapter name. */
export const LORA_MAX_NAME_CHARS = 256;

export interface LoraAdaptersReading {
  /** The latest series read; null when the engine shows no such metric or it is malformed. */
  readonly loraAdapters: LoraAdapters | null;
  /** The metric is there but could not be read (see the file header). */
  readonly loraAdaptersMalformed: boolean;
}

const ABSENT: LoraAdaptersReading = { loraAdapters: null, loraAdaptersMalformed: false };
const MALFORMED: LoraAdaptersReading = { loraAdapters: null, loraAdaptersMalformed: true };

/** The LoRA residency an exposition shows (vLLM only; other engines: `{ null, false }`). */
export function readLoraAdapters(series: SeriesReader): LoraAdaptersReading {
  const samples = series.samples(LORA_METRIC_NAMES.requestsInfo);
  if (samples.length === 0) return ABSENT;
  const latest = latestSample(samples);
  if (latest === null) return MALFORMED;
  const adapters = adaptersOf(latest.labels);
  return adapters === null ? MALFORMED : { loraAdapters: adapters, loraAdaptersMalformed: false };
}

/** The series with the largest value (the first of equals); null when any value is NaN or ±Inf. */
function latestSample(samples: readonly PrometheusSample[]): PrometheusSample | null {
  let latest: PrometheusSample | null = null;
  for (const sample of samples) {
    if (!Number.isFinite(sample.value)) return null;
    if (latest === null || sample.value > latest.value) latest = sample;
  }
  return latest;
}

function adaptersOf(labels: Readonly<Record<string, string>>): LoraAdapters | null {
  const maxLoras = nonNegativeInteger(labels['max_lora']);
  const running = adapterNames(labels['running_lora_adapters']);
  const waiting = adapterNames(labels['waiting_lora_adapters']);
  if (maxLoras === null || running === null || waiting === null) return null;
  return { running, waiting, maxLoras };
}

/**
 * A comma-joined label → distinct non-empty names, sorted by code unit (so a reordering is no change);
 * null when the label is missing or a bound is exceeded.
 */
function adapterNames(label: string | undefined): readonly string[] | null {
  if (label === undefined) return null;
  const names = new Set<string>();
  for (const name of label.split(',')) {
    if (name.length > LORA_MAX_NAME_CHARS) return null;
    if (name.length > 0) names.add(name);
    if (names.size > LORA_MAX_NAMES) return null;
  }
  return [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

function nonNegativeInteger(text: string | undefined): number | null {
  if (text === undefined || !/^\d+$/.test(text)) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : null;
}
