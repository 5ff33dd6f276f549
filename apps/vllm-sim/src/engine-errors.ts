import type { MetricsDialect } from './metrics/render-metrics';

/**
 * Error bodies as each imitated engine writes them (shared/reference/engine-protocols.md), so that the
 * router is tested against the real variety:
 * - vLLM ≥0.10.1: `{"error":{"message","type","param","code"}}`
 * - vLLM ≤0.10.0 and SGLang: flat `{"object":"error","message","type","param","code"}`
 * - llama.cpp: `{"error":{"code","message","type"}}` with its own type names.
 */
export type EngineErrorKind = 'bad-request' | 'not-found' | 'internal' | 'unavailable' | 'too-large';

const STATUS: Record<EngineErrorKind, number> = {
  'bad-request': 400,
  'not-found': 404,
  'too-large': 413,
  internal: 500,
  unavailable: 503,
};

const VLLM_TYPE: Record<EngineErrorKind, string> = {
  'bad-request': 'BadRequestError',
  'not-found': 'NotFoundError',
  'too-large': 'BadRequestError',
  internal: 'InternalServerError',
  unavailable: 'ServiceUnavailableError',
};

const LLAMACPP_TYPE: Record<EngineErrorKind, string> = {
  'bad-request': 'invalid_request_error',
  'not-found': 'not_found_error',
  'too-large': 'invalid_request_error',
  internal: 'server_error',
  unavailable: 'unavailable_error',
};

export class EngineError extends Error {
  constructor(
    readonly kind: EngineErrorKind,
    message: string,
    readonly statusOverride?: number,
    /** vLLM's error `type` when it is not the kind's usual one (e.g. `InvalidUserInput` of the LoRA endpoints). */
    readonly vllmTypeOverride?: string,
  ) {
    super(message);
  }

  get status(): number {
    return this.statusOverride ?? STATUS[this.kind];
  }
}

export function engineErrorBody(dialect: MetricsDialect, error: EngineError): object {
  const status = error.status;
  const vllmType = error.vllmTypeOverride ?? VLLM_TYPE[error.kind];
  switch (dialect) {
    case 'vllm':
      return { error: { message: error.message, type: vllmType, param: null, code: status } };
    case 'vllm-v0':
    case 'sglang':
      return { object: 'error', message: error.message, type: vllmType, param: null, code: status };
    case 'llamacpp':
      return { error: { code: status, message: error.message, type: LLAMACPP_TYPE[error.kind] } };
  }
}
