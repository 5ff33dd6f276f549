import { describe, expect, it } from 'vitest';
import { PolicyTable } from './policy-table';

const learned = {
  bytesPerToken: { value: 2, samples: 50 },
  prefillMsPerToken: { value: 0.126, samples: 30 },
  queueMsPerRequest: { value: 0.5, samples: 500 },
};

describe('PolicyTable calibration', () => {
  it('routes on the learned figures it is told to, keeps the configured others, and rebuilds the pool policy only then', () => {
    const table = new PolicyTable({
      policy: 'cacheaware',
      passthroughPolicy: 'leastloaded',
      params: { cacheaware: { queueMsPerRequest: 3 } },
      calibratedFigures: ['bytesPerToken', 'prefillMsPerToken'],
    });
    const before = table.policyFor('m', 'generation');
    table.applyLearned('m', learned);
    const after = table.policyFor('m', 'generation');
    expect(after).not.toBe(before);
    expect(table.costModel('m')).toEqual({
      configured: { bytesPerToken: 4, prefillMsPerToken: 0.07, queueMsPerRequest: 3 },
      learned,
      inUse: { bytesPerToken: 2, prefillMsPerToken: 0.126, queueMsPerRequest: 3 },
    });
    expect(table.prefillMsPerToken('m')).toBe(0.126);
    expect(table.prefillMsPerToken('other')).toBe(0.07);
    // A move under 2 %: the same policy instance.
    table.applyLearned('m', { ...learned, bytesPerToken: { value: 2.01, samples: 60 } });
    expect(table.policyFor('m', 'generation')).toBe(after);
    // Other pools and the passthrough policy are untouched.
    expect(table.costModel('other').inUse).toEqual({ bytesPerToken: 4, prefillMsPerToken: 0.07, queueMsPerRequest: 3 });
  });

  it('with no figures to use, learns and shows them but routes on the configured ones', () => {
    const table = new PolicyTable({
      policy: 'cacheaware',
      passthroughPolicy: 'leastloaded',
      params: {},
      calibratedFigures: [],
    });
    const before = table.policyFor('m', 'generation');
    table.applyLearned('m', learned);
    expect(table.policyFor('m', 'generation')).toBe(before);
    expect(table.costModel('m').learned).toEqual(learned);
    expect(table.costModel('m').inUse).toEqual({ bytesPerToken: 4, prefillMsPerToken: 0.07, queueMsPerRequest: 5 });
  });
});
