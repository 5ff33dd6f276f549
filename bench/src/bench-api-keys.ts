import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * API keys a benchmark makes for its own run (never stored): the secret its clients send, in the
 * router's format (`kvr_` + 32 random bytes, base64url; apps/router/src/tenants/api-key.ts), and a key
 * file (`--api-keys-file`) holding only their SHA-256, one tenant per key, with the limits given.
 */
export interface BenchKey {
  readonly id: string;
  readonly secret: string;
  /** Key-file fields beside id, tenant and sha256 (requestsPerMinute, tokensPerMinute, concurrentRequests). */
  readonly limits: Readonly<Record<string, number>>;
}

export function newBenchKey(id: string, limits: Readonly<Record<string, number>>): BenchKey {
  return { id, secret: `kvr_${randomBytes(32).toString('base64url')}`, limits };
}

/** Writes a key file for `keys` in a new temporary directory; returns its path (the caller removes the directory). */
export function writeBenchKeyFile(keys: readonly BenchKey[]): string {
  const entries = keys.map((key) => {
    const digest = createHash('sha256').update(key.secret).digest('hex');
    const fields = Object.entries(key.limits).map(([name, value]) => `    ${name}: ${value}\n`);
    return `  - id: ${key.id}\n    tenant: ${key.id}\n    sha256: ${digest}\n${fields.join('')}`;
  });
  const file = join(mkdtempSync(join(tmpdir(), 'kvroute-bench-keys-')), 'keys.yaml');
  writeFileSync(file, `keys:\n${entries.join('')}`);
  return file;
}
