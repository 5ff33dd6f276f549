import type { Engine, Sequence } from '../engine/engine';

/**
 * llama.cpp `llama-server` slot views (tools/server, build ~b6500): `GET /slots` and the `total_slots`
 * part of `GET /props`. llama.cpp runs a fixed number of slots (`--parallel`), one request each; the
 * simulator shows min(slots, max_num_seqs) of them and puts its running sequences, oldest admission
 * first, in slots 0, 1, … (llama.cpp assigns slots by its own LRU policy; routers only count them).
 */

/** Sampling parameters of a slot as `/slots` prints them (default metrics-only view, trimmed). */
export interface LlamaCppSlotParams {
  readonly n_predict: number;
  readonly seed: number;
  readonly temperature: number;
  readonly top_k: number;
  readonly top_p: number;
  readonly min_p: number;
  readonly max_tokens: number;
  readonly n_keep: number;
  readonly ignore_eos: boolean;
  readonly stream: boolean;
}

export interface LlamaCppSlot {
  readonly id: number;
  /** Task id of the request in the slot; -1 when idle. */
  readonly id_task: number;
  /** Context size of the slot, tokens. */
  readonly n_ctx: number;
  readonly speculative: boolean;
  readonly is_processing: boolean;
  readonly params: LlamaCppSlotParams;
  readonly next_token: {
    readonly has_next_token: boolean;
    readonly has_new_line: boolean;
    /** Tokens left before `n_predict`; -1 when unlimited. */
    readonly n_remain: number;
    readonly n_decoded: number;
  };
}

export interface LlamaCppProps {
  readonly default_generation_settings: { readonly n_ctx: number; readonly params: LlamaCppSlotParams };
  readonly total_slots: number;
  readonly model_path: string;
  readonly modalities: { readonly vision: boolean; readonly audio: boolean };
}

/** Slots shown: `slots` (llama.cpp `--parallel`) capped to the profile's max_num_seqs; at least 1. */
export function llamaCppSlotCount(engine: Engine, slots?: number): number {
  const maxSeqs = engine.profile.maxNumSeqs;
  return Math.max(1, Math.min(maxSeqs, slots ?? maxSeqs));
}

/**
 * llama.cpp's sampling defaults (n_predict -1 = unlimited). Float parameters are C++ floats printed as
 * doubles, hence 0.800000011920929 rather than 0.8.
 */
function defaultParams(): LlamaCppSlotParams {
  return {
    n_predict: -1,
    seed: 4294967295,
    temperature: Math.fround(0.8),
    top_k: 40,
    top_p: Math.fround(0.95),
    min_p: Math.fround(0.05),
    max_tokens: -1,
    n_keep: 0,
    ignore_eos: false,
    stream: true,
  };
}

function busySlot(id: number, sequence: Sequence, nCtx: number): LlamaCppSlot {
  const nPredict = sequence.spec.maxTokensParam;
  return {
    id,
    // The simulator's admission counter stands in for llama.cpp's task id (unique, increasing).
    id_task: sequence.admissionOrder,
    n_ctx: nCtx,
    speculative: false,
    is_processing: true,
    // `stream` is not known to the engine; true, as most router traffic streams.
    params: { ...defaultParams(), n_predict: nPredict, max_tokens: nPredict },
    next_token: {
      has_next_token: true,
      has_new_line: false,
      n_remain: nPredict - sequence.outputCount,
      n_decoded: sequence.outputCount,
    },
  };
}

function idleSlot(id: number, nCtx: number): LlamaCppSlot {
  return {
    id,
    id_task: -1,
    n_ctx: nCtx,
    speculative: false,
    is_processing: false,
    params: defaultParams(),
    next_token: { has_next_token: true, has_new_line: false, n_remain: -1, n_decoded: 0 },
  };
}

/** `GET /slots`: one entry per slot, `is_processing` for those holding a running sequence. */
export function renderLlamaCppSlots(engine: Engine, slots?: number): LlamaCppSlot[] {
  const total = llamaCppSlotCount(engine, slots);
  const running = engine.runningSequences;
  const nCtx = engine.maxModelLen;
  const view: LlamaCppSlot[] = [];
  for (let id = 0; id < total; id++) {
    const sequence = running[id];
    view.push(sequence ? busySlot(id, sequence, nCtx) : idleSlot(id, nCtx));
  }
  return view;
}

/** `GET /props`, trimmed to what routers read (`total_slots`) plus identifying fields. */
export function renderLlamaCppProps(engine: Engine, modelName: string, slots?: number): LlamaCppProps {
  return {
    default_generation_settings: { n_ctx: engine.maxModelLen, params: defaultParams() },
    total_slots: llamaCppSlotCount(engine, slots),
    model_path: modelName,
    modalities: { vision: false, audio: false },
  };
}
