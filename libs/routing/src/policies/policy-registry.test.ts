import { describe, expect, it } from 'vitest';
import { aContext, aRequest, someCandidates } from '../test-support/builders';
import {
  createPolicy,
  DEFAULT_POLICY_PARAMS,
  isPolicyName,
  POLICY_NAMES,
  policyParamsFromSettings,
  policySettingKeys,
} from './policy-registry';

describe('policy registry', () => {
  it.each(POLICY_NAMES)(
    'creates %s under its own name, with a documented score and a decision for any pool',
    (name) => {
      const policy = createPolicy(name);
      expect(policy.name).toBe(name);
      expect(policy.scoreDirection.length).toBeGreaterThan(0);
      const decision = policy.choose(aRequest({ sessionKey: 's' }), someCandidates(3), aContext());
      expect(decision.kind).toBe('routed');
      expect(decision.kind === 'routed' && decision.scores).toHaveLength(3);
    },
  );

  it('has defaults for every policy', () => {
    expect(Object.keys(DEFAULT_POLICY_PARAMS).sort()).toEqual([...POLICY_NAMES].sort());
    expect(DEFAULT_POLICY_PARAMS.cacheaware).toMatchObject({
      prefillMsPerToken: 0.07,
      queueMsPerRequest: 5,
      spreadAbs: 8,
      spreadRel: 2,
    });
    expect(DEFAULT_POLICY_PARAMS.prefixaware).toEqual({ minMatchBlocks: 2, saturationInflight: 8 });
  });

  it('passes each policy only its own parameters, keeping defaults for what is left out', () => {
    // A prefixaware override must not reach kvrouter, and an explicit undefined keeps the default.
    const params = { prefixaware: { minMatchBlocks: 0 }, kvrouter: { cacheHitBonus: undefined } };
    expect(() => createPolicy('kvrouter', params)).not.toThrow();
    const pinsOnAnyMatch = createPolicy('prefixaware', params).choose(aRequest(), someCandidates(2), aContext());
    expect(pinsOnAnyMatch).toMatchObject({ reason: 'longest-prefix' });
    expect(() => createPolicy('session', { session: { loadFactor: 0 } })).toThrow(RangeError);
  });

  it('recognises policy names', () => {
    expect(isPolicyName('cacheaware')).toBe(true);
    expect(isPolicyName('cache_aware')).toBe(false);
  });
});

describe('policy parameter tables in the registry', () => {
  it('name the router config keys, a shared key once with every parameter it sets', () => {
    const keys = new Map(
      policySettingKeys().map((entry) => [entry.key, entry.rows.map((row) => `${row.policy}.${row.param}`)]),
    );
    expect(keys.get('minMatchBlocks')).toEqual(['cacheaware.minMatchBlocks', 'prefixaware.minMatchBlocks']);
    expect(keys.get('loadFactor')).toEqual(['cacheaware.coldLoadFactor', 'chwbl.loadFactor', 'session.loadFactor']);
    expect(keys.get('kvrouterCacheHitBonus')).toEqual(['kvrouter.cacheHitBonus']);
    expect(keys.has('bytesPerToken')).toBe(false);
  });

  it('map config settings to each policy’s parameters; unset keys keep each policy’s own default', () => {
    const params = policyParamsFromSettings({
      minMatchBlocks: 3,
      loadFactor: undefined,
      ownershipAt: 'routing',
      chwblVirtualNodes: 40,
    });
    expect(params).toEqual({
      cacheaware: { minMatchBlocks: 3, ownershipAt: 'routing' },
      prefixaware: { minMatchBlocks: 3 },
      chwbl: { vnodesPerWeight: 40 },
    });
    expect(createPolicy('cacheaware', params).recordsOwnership).toBe('at-routing');
    expect(createPolicy('cacheaware').recordsOwnership).toBe('at-first-output');
  });
});
