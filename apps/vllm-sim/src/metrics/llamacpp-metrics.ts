import { ExpositionWriter, formatCppStreamValue, type MetricType } from './exposition-writer';
import { llamaCppSlotCount } from './llamacpp-slots';
import type { MetricsSource } from './metrics-source';

interface LlamaCppMetric {
  readonly name: string;
  readonly help: string;
  readonly value: number;
}

/** llama.cpp stores times in milliseconds and prints `(uint64_t) ms / 1e3`: seconds truncated to the millisecond. */
function truncatedSeconds(seconds: number): number {
  return Math.floor(seconds * 1000) / 1000;
}

/** Tokens per second; 0 before any time was spent (llama.cpp prints 0 when nothing was processed). */
function rate(tokens: number, seconds: number): number {
  return seconds > 0 ? tokens / seconds : 0;
}

/**
 * llama.cpp `llama-server --metrics` `/metrics` (tools/server, build ~b6500, after ggml-org/llama.cpp#13660
 * removed the KV-cache gauges). The server builds a JSON object `{counter: [...], gauge: [...]}` whose
 * keys iterate sorted, so all counters come first; each value goes through a double and
 * `std::ostream <<` (6 significant digits). No labels. `n_busy_slots_per_decode` is declared under
 * "counter" although it is an average: reproduced as is.
 *
 * Sources in the simulator (one engine step = one `llama_decode()` call):
 * - prompt tokens processed = prompt tokens looked up minus those served from the cache;
 * - prompt / predict seconds = engine busy time in steps that prefilled / only decoded;
 * - the throughput gauges are lifetime averages (llama.cpp averages over the interval since the
 *   previous scrape, which would make rendering stateful);
 * - busy slots per decode: each decode or final prefill chunk of a slot emits one token, so
 *   generated tokens / steps (it misses non-final chunks of long prompts).
 */
export function renderLlamaCppMetrics(source: MetricsSource): string {
  const { engine } = source;
  const stats = engine.stats;
  const totalSlots = llamaCppSlotCount(engine, source.slots);
  const processing = Math.min(engine.runningCount, totalSlots);
  // Sequences the engine runs beyond the shown slots wait for a slot in llama.cpp.
  const deferred = engine.waitingCount + (engine.runningCount - processing);
  const promptTokensProcessed = stats.prefixQueryTokens - stats.prefixHitTokens;

  const groups: ReadonlyArray<readonly [MetricType, readonly LlamaCppMetric[]]> = [
    [
      'counter',
      [
        { name: 'prompt_tokens_total', help: 'Number of prompt tokens processed.', value: promptTokensProcessed },
        {
          name: 'prompt_seconds_total',
          help: 'Prompt process time',
          value: truncatedSeconds(stats.prefillBusySeconds),
        },
        {
          name: 'tokens_predicted_total',
          help: 'Number of generation tokens processed.',
          value: stats.generationTokens,
        },
        {
          name: 'tokens_predicted_seconds_total',
          help: 'Predict process time',
          value: truncatedSeconds(stats.decodeBusySeconds),
        },
        { name: 'n_decode_total', help: 'Total number of llama_decode() calls', value: stats.steps },
        {
          name: 'n_busy_slots_per_decode',
          help: 'Average number of busy slots per llama_decode() call',
          // Computed in C++ float, then widened to double.
          value: Math.fround(Math.fround(stats.generationTokens) / Math.max(Math.fround(stats.steps), 1)),
        },
      ],
    ],
    [
      'gauge',
      [
        // Rates divide by the untruncated times, as llama.cpp divides by its millisecond doubles.
        {
          name: 'prompt_tokens_seconds',
          help: 'Average prompt throughput in tokens/s.',
          value: rate(promptTokensProcessed, stats.prefillBusySeconds),
        },
        {
          name: 'predicted_tokens_seconds',
          help: 'Average generation throughput in tokens/s.',
          value: rate(stats.generationTokens, stats.decodeBusySeconds),
        },
        { name: 'requests_processing', help: 'Number of requests processing.', value: processing },
        { name: 'requests_deferred', help: 'Number of requests deferred.', value: deferred },
      ],
    ],
  ];

  const writer = new ExpositionWriter(formatCppStreamValue);
  for (const [type, metrics] of groups) {
    for (const { name, help, value } of metrics) {
      writer.family(`llamacpp:${name}`, type, help);
      writer.sample(`llamacpp:${name}`, [], value);
    }
  }
  return writer.text();
}
