import { createHash } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { newBenchKey, writeBenchKeyFile } from './bench-api-keys';

describe('bench API keys', () => {
  it('makes router-format secrets and a key file holding only their digests and limits', () => {
    const a = newBenchKey('rpm-tenant', { requestsPerMinute: 600 });
    const b = newBenchKey('tpm-tenant', { tokensPerMinute: 30_000, concurrentRequests: 8 });
    expect(a.secret).toMatch(/^kvr_[A-Za-z0-9_-]{43}$/);
    expect(a.secret).not.toBe(b.secret);
    const file = writeBenchKeyFile([a, b]);
    try {
      const text = readFileSync(file, 'utf8');
      expect(text).not.toContain(a.secret);
      expect(parseYaml(text)).toEqual({
        keys: [
          {
            id: 'rpm-tenant',
            tenant: 'rpm-tenant',
            sha256: createHash('sha256').update(a.secret).digest('hex'),
            requestsPerMinute: 600,
          },
          {
            id: 'tpm-tenant',
            tenant: 'tpm-tenant',
            sha256: createHash('sha256').update(b.secret).digest('hex'),
            tokensPerMinute: 30_000,
            concurrentRequests: 8,
          },
        ],
      });
    } finally {
      rmSync(dirname(file), { recursive: true, force: true });
    }
  });
});
