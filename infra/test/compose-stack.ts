/** The services of docker-compose.yml by role, as compose.test.ts and compose.system.test.ts name them. */
export const ROUTERS = ['router-1', 'router-2', 'router-3'];
export const POLLERS = ['poller-1', 'poller-2'];
export const SIMS = ['sim-1', 'sim-2', 'sim-3', 'sim-4'];
export const VLLMS = ['vllm-1', 'vllm-2', 'vllm-3', 'vllm-4'];
/** Profile pd: prefill/decode sims and the one router that knows their roles. */
export const PD_PREFILL_SIMS = ['prefill-1', 'prefill-2'];
export const PD_DECODE_SIMS = ['decode-1', 'decode-2'];
export const PD_SIMS = [...PD_PREFILL_SIMS, ...PD_DECODE_SIMS];
export const PD_ROUTER = 'router-pd';
export const BACKEND_ALIASES = ['backend-1', 'backend-2', 'backend-3', 'backend-4'];

/** The backend list routers and pollers get: every backend-N alias on `port`. */
export const backendList = (port: string): string =>
  BACKEND_ALIASES.map((alias) => `http://${alias}:${port}`).join(',');
