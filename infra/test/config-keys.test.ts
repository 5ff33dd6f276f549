import { describe, expect, it } from 'vitest';
import { knownEnvVars, unknownConfigKeys, unknownEnvVars } from './config-keys';

describe('config keys of the apps (what deployment files may set)', () => {
  it('derives the env vars the config loader reads', () => {
    expect(knownEnvVars('router')).toContain('KVROUTE_REDIS_URL');
    expect(knownEnvVars('router')).toContain('KVROUTE_CONFIG');
    expect(knownEnvVars('poller')).toContain('KVROUTE_POLLER_INTERVAL_MS');
    expect(knownEnvVars('sim')).toContain('KVROUTE_SIM_TIME_SCALE');
  });

  it('flags misspelled or foreign variables and keys', () => {
    expect(unknownEnvVars('router', ['KVROUTE_POLICY', 'KVROUTE_POLICIES', 'NODE_ENV', 'KVROUTE_SIM_PROFILE'])).toEqual(
      ['KVROUTE_POLICIES', 'KVROUTE_SIM_PROFILE'],
    );
    expect(unknownConfigKeys('poller', ['intervalMs', 'interval'])).toEqual(['interval']);
  });
});
