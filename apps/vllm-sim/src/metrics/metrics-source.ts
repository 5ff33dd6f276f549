import type { Engine } from '../engine/engine';

/** What every `/metrics` dialect reads: the engine, the served model name and the process start time. */
export interface MetricsSource {
  readonly engine: Engine;
  /** vLLM V1 with data parallelism: every rank's engine in rank order (default: `[engine]`). */
  readonly engines?: readonly Engine[];
  /** First served model name (vLLM and SGLang `model_name` label). */
  readonly modelName: string;
  /** Simulator start, unix seconds (vLLM V1 `_created` families and `process_start_time_seconds`). */
  readonly startedAtUnixSeconds: number;
  /** llama.cpp dialect: parallel slots (`--parallel`), capped to the profile's max_num_seqs. Default: max_num_seqs. */
  readonly slots?: number;
}
