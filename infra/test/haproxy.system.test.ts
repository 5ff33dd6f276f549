import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { repoPath } from './stack-files';

/** infra/haproxy/haproxy.cfg as HAProxy itself reads it (system test: needs `haproxy`, which `npm run test:system` installs). */
describe('infra/haproxy/haproxy.cfg', () => {
  it('is accepted by haproxy -c', () => {
    const result = spawnSync('haproxy', ['-c', '-f', repoPath('infra/haproxy/haproxy.cfg')], {
      encoding: 'utf8',
      timeout: 15_000,
    });
    expect(result.error, 'haproxy is not installed (npm run test:system installs it)').toBeUndefined();
    const output = `${result.stdout}\n${result.stderr}`;
    expect(result.status, output).toBe(0);
    expect(output).toMatch(/Configuration file is valid/);
    // The only acceptable warnings: router hostnames that resolve only inside the compose network.
    const warnings = output.split('\n').filter((line) => line.includes('[WARNING]'));
    const unexpected = warnings.filter((line) => !/could not resolve address 'router-\d+'/.test(line));
    expect(unexpected).toEqual([]);
  });
});
