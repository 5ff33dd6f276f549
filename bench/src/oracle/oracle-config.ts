import { z } from 'zod';

/**
 * The oracle router's configuration (benchmarks only). Precedence as every kvroute process:
 * defaults < config file < env (`KVROUTE_ORACLE_*`) < flags. The bench's local cluster passes
 * `--host`, `--port`, `--backends` and a scenario's `cluster.routerByPolicy.oracle` keys as flags.
 */
export const OracleConfig = z.object({
  host: z.string().default('127.0.0.1').describe('address to listen on (loopback: the oracle is a benchmark tool)'),
  port: z.coerce.number().int().min(0).max(65_535).default(0).describe('port to listen on (0: any free port)'),
  backends: z.array(z.url()).min(1).describe('vllm-sim backend URLs (comma-separated on the command line); each must answer POST /sim/match'),
  matchTimeoutMs: z.coerce.number().int().positive().default(500).describe("how long to wait for each backend's POST /sim/match before counting it as holding nothing, ms"),
  bodyLimitBytes: z.coerce.number().int().positive().default(64 * 1024 * 1024).describe('largest request body accepted (it is held in memory to be asked about and relayed), bytes'),
});

export type OracleConfig = z.infer<typeof OracleConfig>;

export const ORACLE_ENV_PREFIX = 'KVROUTE_ORACLE_';
