import { describe, expect, it } from 'vitest';
import { toEnvName, toFlagName } from './option-names';

describe('option names', () => {
  it.each([
    ['timeScale', 'time-scale', 'KVROUTE_SIM_TIME_SCALE'],
    ['maxNumSeqs', 'max-num-seqs', 'KVROUTE_SIM_MAX_NUM_SEQS'],
    ['redisURL', 'redis-url', 'KVROUTE_SIM_REDIS_URL'],
    ['p99Ms', 'p99-ms', 'KVROUTE_SIM_P99_MS'],
    ['port', 'port', 'KVROUTE_SIM_PORT'],
  ])('spells %s as --%s and %s', (key, flag, env) => {
    expect(toFlagName(key)).toBe(flag);
    expect(toEnvName(key, 'KVROUTE_SIM_')).toBe(env);
  });

  it('derives the config file env var from a kebab-case flag name', () => {
    expect(toEnvName('config-file', 'KVROUTE_')).toBe('KVROUTE_CONFIG_FILE');
  });
});
