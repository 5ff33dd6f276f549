import { EngineError } from '../engine-errors';
import type { Engine, Sequence } from '../engine/engine';

/**
 * `kv_transfer_params` as vLLM's NixlConnector reads and writes them (shared/reference/wave3-facts.md §1, vLLM's
 * toy proxy `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`), for a sim started with `--pd-role`:
 *
 * - leg 1, to a prefill instance: `{"do_remote_decode": true, …}`: it runs the request (the proxy asks for one
 *   token), holds the blocks for the decode side and answers the params the decode side needs, top level in the
 *   non-streaming response;
 * - leg 2, to a decode instance: those params (`do_remote_prefill: true`): it pulls what it lacks of the prompt's KV
 *   from the prefill instance, then tells it the blocks were read so it frees them.
 *
 * The sim's side channel is its HTTP port (vLLM's is a ZMQ port, 5600 by default): `remote_host`/`remote_port` name
 * it, and the decode sim POSTs `/sim/kv-transfer/done` there. A router forwards the dict untouched either way.
 */
export type PdRole = 'none' | 'prefill' | 'decode' | 'both';

export type KvTransferPlan =
  | { readonly kind: 'prefill' }
  /** SGLang, prefill side: one output token, blocks held, the room opened when done (bootstrap-rooms.ts). */
  | { readonly kind: 'bootstrap-prefill'; readonly room: string }
  /** SGLang, decode side: ask the prefill sim for the room, then pull as NIXL's decode side does. */
  | { readonly kind: 'bootstrap-decode'; readonly roomUrl: string; readonly doneUrl: string }
  | {
      readonly kind: 'decode';
      /** Prompt tokens the prefill side computed (`remote_num_tokens`); undefined: the whole prompt. */
      readonly remoteTokens: number | undefined;
      /** Where to say the blocks were read, when the params name it. */
      readonly doneUrl: string | null;
      readonly remoteRequestId: string | null;
    };

/** What this sim does with a body's `kv_transfer_params`: null when its role has no part in them (vLLM without a connector ignores them). */
export function kvTransferPlanOf(body: unknown, role: PdRole): KvTransferPlan | null {
  if (role === 'none' || body === null || typeof body !== 'object') return null;
  const params = (body as { kv_transfer_params?: unknown }).kv_transfer_params;
  if (params === undefined || params === null) return bootstrapPlanOf(body as Record<string, unknown>, role);
  if (typeof params !== 'object' || Array.isArray(params)) {
    throw new EngineError('bad-request', 'Invalid request: kv_transfer_params: Input should be a valid dictionary');
  }
  const fields = params as Record<string, unknown>;
  if (fields.do_remote_decode === true && role !== 'decode') return { kind: 'prefill' };
  if (fields.do_remote_prefill !== true || role === 'prefill') return null;
  const host = typeof fields.remote_host === 'string' ? fields.remote_host : null;
  const port =
    typeof fields.remote_port === 'number' && Number.isInteger(fields.remote_port) ? fields.remote_port : null;
  const remoteTokens =
    typeof fields.remote_num_tokens === 'number' && fields.remote_num_tokens >= 0
      ? fields.remote_num_tokens
      : undefined;
  return {
    kind: 'decode',
    remoteTokens,
    doneUrl: host === null || port === null ? null : `http://${hostForUrl(host)}:${port}/sim/kv-transfer/done`,
    remoteRequestId: typeof fields.remote_request_id === 'string' ? fields.remote_request_id : null,
  };
}

/**
 * SGLang's bootstrap fields: a prefill or decode sim takes part (a sim of role `both` cannot tell which it is, and
 * serves the request whole). Malformed fields are a 400, as SGLang's request schema refuses them.
 */
function bootstrapPlanOf(body: Record<string, unknown>, role: PdRole): KvTransferPlan | null {
  const { bootstrap_room: room, bootstrap_host: host, bootstrap_port: port } = body;
  if (room === undefined || room === null) return null;
  if (!Number.isSafeInteger(room) || (room as number) < 0 || typeof host !== 'string' || !Number.isInteger(port)) {
    throw new EngineError(
      'bad-request',
      'Invalid request: bootstrap_room must be a non-negative integer, with bootstrap_host and bootstrap_port',
    );
  }
  if (role === 'prefill') return { kind: 'bootstrap-prefill', room: String(room) };
  if (role !== 'decode') return null;
  const base = `http://${hostForUrl(host)}:${port as number}`;
  return {
    kind: 'bootstrap-decode',
    roomUrl: `${base}/sim/bootstrap/rooms/${room}`,
    doneUrl: `${base}/sim/kv-transfer/done`,
  };
}

/**
 * A decode side's bootstrap plan made a pull plan: the prefill sim's room once it opens (waiting up to `timeoutMs`),
 * or null when it never does (the decode sim then prefills locally).
 */
export async function bootstrapDecodePlan(
  plan: Extract<KvTransferPlan, { kind: 'bootstrap-decode' }>,
  timeoutMs: number,
): Promise<KvTransferPlan | null> {
  try {
    const response = await fetch(plan.roomUrl, { signal: AbortSignal.timeout(timeoutMs) });
    if (response.status !== 200) {
      await response.body?.cancel();
      return null;
    }
    const room = (await response.json()) as { remote_request_id?: unknown; tokens?: unknown };
    if (typeof room.remote_request_id !== 'string' || typeof room.tokens !== 'number') return null;
    return {
      kind: 'decode',
      remoteTokens: room.tokens,
      doneUrl: plan.doneUrl,
      remoteRequestId: room.remote_request_id,
    };
  } catch {
    return null;
  }
}

function hostForUrl(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

/** This sim's identity on the side channel: its engine id, and the host and port the decode side reaches it at. */
export interface SideChannel {
  readonly engineId: string;
  address(): { readonly host: string; readonly port: number };
}

/**
 * The params a prefill instance answers for `sequence` (finished, its blocks held by `engine`): what vLLM's
 * `NixlPullConnectorScheduler.request_finished` returns. Null when nothing is held (an aborted request): vLLM
 * then answers no params and the decode side prefills locally.
 */
export function prefillAnswerParams(
  engine: Engine,
  sequence: Sequence,
  channel: SideChannel,
  nowUnixSeconds: number,
): Record<string, unknown> | null {
  const blockIds = engine.holds.blockIds(sequence.id);
  if (blockIds === null || sequence.holdExpiresAtMs === null) return null;
  const { host, port } = channel.address();
  const leaseLeftSeconds = Math.max(0, (sequence.holdExpiresAtMs - (sequence.lastTokenAtMs ?? 0)) / 1000);
  return {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_block_ids: [blockIds],
    remote_engine_id: channel.engineId,
    remote_request_id: sequence.id,
    remote_host: host,
    remote_port: port,
    tp_size: 1,
    remote_num_tokens: sequence.promptLength,
    remote_blocks_expiry_time: nowUnixSeconds + leaseLeftSeconds,
    transfer_mode: 'pull',
  };
}

/** Tells the prefill instance its blocks were read (best effort: its lease frees them otherwise). */
export function notifyPrefillDone(plan: KvTransferPlan | null, timeoutMs = 2_000): void {
  if (plan?.kind !== 'decode' || plan.doneUrl === null || plan.remoteRequestId === null) return;
  fetch(plan.doneUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ remote_request_id: plan.remoteRequestId }),
    signal: AbortSignal.timeout(timeoutMs),
  })
    .then((response) => response.body?.cancel())
    .catch(() => undefined);
}
