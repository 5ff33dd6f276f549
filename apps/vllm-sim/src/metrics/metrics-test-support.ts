import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { Engine, type EngineOptions, type Sequence } from '../engine/engine';
import { getProfile } from '../engine/profiles';
import type { MetricsSource } from './metrics-source';
import { renderMetrics, type MetricsDialect } from './render-metrics';

/**
 * Test support for the metrics dialect tests (imported by `*.test.ts` only): drives a real engine on
 * its simulated timeline and reads expositions back through `parse-prometheus-text-format`.
 */

export const MODEL_NAME = 'Qwen/Qwen2.5-7B-Instruct';
/** A realistic start time whose floatToGoString is `1.7612044183526373e+09`. */
export const STARTED_AT_UNIX_SECONDS = 1761204418.3526373;

export function newEngine(
  version: 'v1' | 'v0',
  overrides: Partial<Pick<EngineOptions, 'numGpuBlocks' | 'maxModelLen'>> = {},
): Engine {
  return new Engine({ profile: getProfile('a100-7b'), version, ...overrides });
}

/**
 * `engine`'s exposition in `dialect`, always under MODEL_NAME and STARTED_AT_UNIX_SECONDS because the
 * dialect tests assert on both; `options` carries what a test varies (llama.cpp `slots`).
 */
export function renderDialect(
  dialect: MetricsDialect,
  engine: Engine,
  options: Pick<MetricsSource, 'slots'> = {},
): string {
  return renderMetrics(dialect, {
    engine,
    modelName: MODEL_NAME,
    startedAtUnixSeconds: STARTED_AT_UNIX_SECONDS,
    ...options,
  });
}

import { syntheticTokenPrompt as tokenPrompt } from '@kvroute/workloads';

export { tokenPrompt };

let nextId = 0;

export function addRequest(
  engine: Engine,
  promptTokens: number[],
  outputTokens: number,
  finishReason: 'stop' | 'length',
  arrivalMs: number,
): Sequence {
  return engine.add(
    {
      id: `metrics-${nextId++}`,
      promptTokens,
      outputTokens,
      finishReason,
      outputTokenAt: (index) => 60_000 + index,
      maxTokensParam: outputTokens,
      listener: { onToken: () => undefined, onFinish: () => undefined },
    },
    arrivalMs,
  );
}

/** Runs planned steps back to back from `startMs`, at most `maxSteps`; returns the time reached. */
export function runSteps(engine: Engine, startMs: number, maxSteps = Infinity): number {
  let now = startMs;
  for (let step = 0; step < maxSteps; step++) {
    const plan = engine.planStep(now);
    if (!plan) {
      const readyAt = engine.nextReadyAtMs();
      if (readyAt === null || readyAt <= now) return now;
      now = readyAt;
      continue;
    }
    engine.completeStep(plan);
    now = plan.startMs + plan.durationMs;
  }
  return now;
}

export interface Workload {
  readonly engine: Engine;
  readonly sequences: readonly Sequence[];
  /** The long request, still running (prefilled, decoding) when the workload returns. */
  readonly long: Sequence;
  readonly nowMs: number;
}

/**
 * A small mixed workload: a 2048-token request, the same prompt again (a prefix hit of 2032 tokens),
 * six short distinct ones, one aborted mid-generation, then an 8192-token request left running.
 * Finish reasons: stop 7, length 1, abort 1.
 */
export function runMixedWorkload(version: 'v1' | 'v0'): Workload {
  const engine = newEngine(version);
  const sequences: Sequence[] = [];
  const shared = tokenPrompt(2048, 1);
  sequences.push(addRequest(engine, shared, 20, 'length', 0));
  let now = runSteps(engine, 0);
  sequences.push(addRequest(engine, shared, 5, 'stop', now));
  for (let i = 0; i < 6; i++) sequences.push(addRequest(engine, tokenPrompt(100, 10 + i), 3, 'stop', now));
  now = runSteps(engine, now);
  const aborted = addRequest(engine, tokenPrompt(300, 99), 50, 'stop', now);
  sequences.push(aborted);
  now = runSteps(engine, now, 3);
  engine.abort(aborted, now);
  const long = addRequest(engine, tokenPrompt(8192, 5), 400, 'length', now);
  sequences.push(long);
  now = runSteps(engine, now, 8);
  return { engine, sequences, long, nowMs: now };
}

export interface ParsedSample {
  /** Family the sample belongs to (the last `# TYPE` line above it). */
  readonly family: string;
  readonly name: string;
  /** Label names in printed order. */
  readonly labelNames: readonly string[];
  readonly labels: Readonly<Record<string, string>>;
  readonly value: string;
}

/** Every sample line, each parsed by the package on its own (it keeps label order; histograms keep labels). */
export function parseSamples(text: string): ParsedSample[] {
  const samples: ParsedSample[] = [];
  let family = '';
  for (const line of text.split('\n')) {
    if (line.startsWith('# TYPE ')) family = line.split(' ')[2] ?? '';
    if (line === '' || line.startsWith('#')) continue;
    const [parsed] = parsePrometheusTextFormat(`${line}\n`);
    const sample = parsed?.metrics[0];
    if (!parsed || !sample) throw new Error(`unparsed sample line: ${line}`);
    const labels = sample.labels ?? {};
    samples.push({ family, name: parsed.name, labelNames: Object.keys(labels), labels, value: sample.value ?? '' });
  }
  return samples;
}

export interface FamilyShape {
  readonly type: string;
  /** Label names of the family's series, sorted, without `le`. */
  readonly labelNames: readonly string[];
}

/** Family name → type (from the package's parse of the whole text) and label names. */
export function familyShapes(text: string): Map<string, FamilyShape> {
  const labelNames = new Map<string, Set<string>>();
  for (const sample of parseSamples(text)) {
    const names = labelNames.get(sample.family) ?? new Set<string>();
    for (const name of sample.labelNames) if (name !== 'le') names.add(name);
    labelNames.set(sample.family, names);
  }
  return new Map(
    parsePrometheusTextFormat(text).map((family) => [
      family.name,
      { type: family.type, labelNames: [...(labelNames.get(family.name) ?? [])].sort() },
    ]),
  );
}

/** Value of the only sample named `name` (a counter, gauge, `_sum` or `_count`), as printed. */
export function rawValue(text: string, name: string): string {
  const matches = parseSamples(text).filter((sample) => sample.name === name);
  if (matches.length !== 1) throw new Error(`expected one ${name} sample, found ${matches.length}`);
  return (matches[0] as ParsedSample).value;
}

/** Σ prompt tokens looked up and found in the cache, from the sequences themselves. */
export function prefixTotals(sequences: readonly Sequence[]): { queried: number; hit: number } {
  let queried = 0;
  let hit = 0;
  for (const sequence of sequences) {
    if (sequence.admittedAtMs === null) continue;
    queried += sequence.promptLength;
    hit += sequence.cachedTokens ?? 0;
  }
  return { queried, hit };
}
