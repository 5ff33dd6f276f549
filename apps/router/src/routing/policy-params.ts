import type { PolicyParams } from '@kvroute/routing';
import type { RouterConfig } from '../config';

/**
 * Policy parameters from the router config. Keys are shared where the seed semantics coincide
 * (`minMatchBlocks`, `saturationInflight`, `loadFactor`); a key left unset keeps each policy's own
 * default (prefixaware: min 2 blocks, valve 8; cacheaware: min 0 blocks = every prompt by cost, valve off).
 */
export function policyParamsFromConfig(config: RouterConfig): PolicyParams {
  return {
    prefixaware: { minMatchBlocks: config.minMatchBlocks, saturationInflight: config.saturationInflight },
    cacheaware: {
      minMatchBlocks: config.minMatchBlocks,
      saturationInflight: config.saturationInflight,
      prefillMsPerToken: config.prefillMsPerToken,
      queueMsPerRequest: config.queueMsPerRequest,
      spreadAbs: config.spreadAbs,
      spreadRel: config.spreadRel,
      coldLoadFactor: config.loadFactor,
      engineWaitingMs: config.engineWaitingMs,
      kvFullMs: config.kvFullMs,
      ownershipAtFirstToken: config.ownershipAt === 'first-token',
    },
    kvrouter: { cacheHitBonus: config.kvrouterCacheHitBonus, loadWeight: config.kvrouterLoadWeight },
    kvaware: { defaultMaxTokens: config.kvawareDefaultMaxTokens, assumedCapacityTokens: config.kvawareAssumedCapacityTokens },
    chwbl: { loadFactor: config.loadFactor, vnodesPerWeight: config.chwblVirtualNodes },
    session: { loadFactor: config.loadFactor },
  };
}
