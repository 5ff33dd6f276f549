import { loadConfig, renderConfigMarkdown } from '@kvroute/platform';
import {
  createPolicy,
  decide,
  InMemoryRoutingState,
  POLICIES,
  POLICY_NAMES,
  policyParamsFromSettings,
  resolveParams,
  type ParamsOf,
  type ParamTable,
  type RoutingPolicy,
} from '@kvroute/routing';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ROUTER_ENV_PREFIX, RouterConfig } from './config';
import { policyConfigFields } from './routing/policy-params';

/**
 * Adding a policy touches 4 files: its file under libs/routing/src/policies (the policy and its
 * parameter table, as below), its test, one line in POLICIES (policy-registry.ts), and
 * docs/configuration.md (`npm run docs:config`). This toy policy is registered only here, in
 * TOY_DEFINITIONS (the registry line), and gets its config key, flag, env var, default, range check,
 * docs row and parameter mapping with nothing else written for it.
 */
const TOY_PARAMS = {
  slots: {
    default: 4,
    min: 1,
    integer: true,
    unit: 'requests',
    doc: 'requests a backend takes before the next one is tried',
    configKey: 'toySlots',
  },
} as const satisfies ParamTable;

function createToyPolicy(params: Partial<ParamsOf<typeof TOY_PARAMS>> = {}): RoutingPolicy {
  const { slots } = resolveParams(TOY_PARAMS, params);
  return {
    name: 'toy',
    scoreDirection: 'lower is better: in-flight requests, [0, ∞)',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    choose(_request, candidates) {
      const chosen = candidates.find((candidate) => candidate.inflight < slots) ?? candidates[0];
      if (chosen === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      const scores = candidates.map((candidate) => ({
        backendId: candidate.backend.id,
        matchBlocks: candidate.matchBlocks,
        inflight: candidate.inflight,
        score: candidate.inflight,
      }));
      return { kind: 'routed', backendId: chosen.backend.id, reason: 'least-loaded', scores };
    },
  };
}

const TOY_DEFINITIONS = { ...POLICIES, toy: { params: TOY_PARAMS, create: createToyPolicy } };

describe('policy config keys come from the policies’ parameter tables', () => {
  it('a toy policy registered in a fixture gets its config key, flag, env var, range check and docs row', async () => {
    const schema = z.object({ backends: z.array(z.string()).min(1), ...policyConfigFields(TOY_DEFINITIONS) });
    const load = (argv: string[], env: Record<string, string> = {}) => {
      const loaded = loadConfig({
        schema,
        argv: ['--backends', 'http://a:1', ...argv],
        env,
        envPrefix: ROUTER_ENV_PREFIX,
      });
      if (loaded.kind !== 'config') throw new Error('help');
      return loaded.config;
    };
    expect(load([]).toySlots).toBe(4);
    expect(load([], { KVROUTE_TOY_SLOTS: '2' }).toySlots).toBe(2);
    expect(load(['--toy-slots', '3'], { KVROUTE_TOY_SLOTS: '2' }).toySlots).toBe(3);
    expect(() => load(['--toy-slots', '0'])).toThrow('--toy-slots: 0 is too small; expected at least 1');

    const params = policyParamsFromSettings(load(['--toy-slots', '1']), TOY_DEFINITIONS);
    expect(params['toy']).toEqual({ slots: 1 });
    const policy = TOY_DEFINITIONS.toy.create(params['toy'] ?? {});
    const state = new InMemoryRoutingState({ maxBlocksPerBackend: 10, blockIdleTtlMs: 0, nowMs: () => 0 });
    const request = {
      model: 'm',
      blockHashes: [],
      blockSizeBytes: 256,
      textBytes: 10,
      contextBlocks: 0,
      headHash: 1,
      sessionKey: null,
    };
    const backends = [
      { id: 'a', weight: 1 },
      { id: 'b', weight: 1 },
    ];
    const routed = [];
    for (const leaseId of ['l1', 'l2']) {
      const { decision } = await decide(state, {
        pool: 'm',
        request,
        backends,
        policy,
        context: { nowMs: 0, random: () => 0 },
        leaseId,
      });
      routed.push(decision.kind === 'routed' ? decision.backendId : 'rejected');
    }
    expect(routed).toEqual(['a', 'b']); // one slot each

    const doc = renderConfigMarkdown(schema, { title: 'toy', envPrefix: ROUTER_ENV_PREFIX });
    expect(doc).toContain(
      '| `toySlots` | `--toy-slots` | `KVROUTE_TOY_SLOTS` | number | `4` | toy: requests a backend ' +
        'takes before the next one is tried (requests; an integer ≥ 1) |',
    );
  });

  it('keeps every policy key of the router with its default, and a shared key unset leaves each policy its own', () => {
    const config = RouterConfig.parse({ backends: ['http://a:1'] });
    expect(config).toMatchObject({
      prefillMsPerToken: 0.07,
      queueMsPerRequest: 5,
      spreadAbs: 8,
      spreadRel: 2,
      loadFactor: 1.25,
      engineWaitingMs: 40,
      kvFullMs: 250,
      ownershipAt: 'first-token',
      kvrouterCacheHitBonus: 100,
      kvrouterLoadWeight: 10,
      kvawareDefaultMaxTokens: 256,
      kvawareAssumedCapacityTokens: 65_536,
      chwblVirtualNodes: 160,
      maxRoutedBlocks: 2048,
    });
    expect(config.minMatchBlocks).toBeUndefined();
    expect(config.saturationInflight).toBeUndefined();
    expect(POLICY_NAMES).not.toContain('oracle');
    expect(RouterConfig.shape).not.toHaveProperty('oracleMatchTimeoutMs');

    // Unset shared keys: prefixaware keeps min 2 blocks and valve 8, cacheaware 0 and off.
    const params = policyParamsFromSettings(config);
    expect(params.prefixaware).toBeUndefined();
    const prefixaware = createPolicy('prefixaware', params);
    const candidates = [
      { backend: { id: 'warm', weight: 1 }, inflight: 0, matchBlocks: 1, pendingPrefillTokens: 0 },
      { backend: { id: 'cold', weight: 1 }, inflight: 0, matchBlocks: 0, pendingPrefillTokens: 0 },
    ];
    const request = {
      model: 'm',
      blockHashes: [1, 2, 3],
      blockSizeBytes: 256,
      textBytes: 800,
      contextBlocks: 0,
      headHash: 1,
      sessionKey: null,
    };
    expect(prefixaware.choose(request, candidates, { nowMs: 0, random: () => 0 })).toMatchObject({
      reason: 'fallback-leastloaded',
    });
    // Set: both take it.
    const set = policyParamsFromSettings(
      RouterConfig.parse({ backends: ['http://a:1'], minMatchBlocks: 1, ownershipAt: 'routing' }),
    );
    expect(set).toMatchObject({
      prefixaware: { minMatchBlocks: 1 },
      cacheaware: { minMatchBlocks: 1, ownershipAt: 'routing' },
    });
    expect(createPolicy('prefixaware', set).choose(request, candidates, { nowMs: 0, random: () => 0 })).toMatchObject({
      backendId: 'warm',
      reason: 'longest-prefix',
    });
    expect(createPolicy('cacheaware', set).recordsOwnership).toBe('at-routing');
  });

  it('checks a value against every policy that shares the key', () => {
    expect(() => RouterConfig.parse({ backends: ['http://a:1'], minMatchBlocks: 1.5 })).toThrow(/minMatchBlocks/);
    expect(() => RouterConfig.parse({ backends: ['http://a:1'], loadFactor: 0.5 })).toThrow(/loadFactor/);
    expect(() => RouterConfig.parse({ backends: ['http://a:1'], ownershipAt: 'later' })).toThrow(/ownershipAt/);
  });
});
