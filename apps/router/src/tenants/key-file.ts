import { readConfigFile } from '@kvroute/platform';
import { z } from 'zod';
import { ApiKeyRecord } from './api-key';
import { FileKeys } from './key-directory';

/**
 * The key file (`apiKeysFile`, YAML or JSON): API keys for deployments without Redis, or fixed ones
 * beside those the admin API adds. It holds digests, never secrets (`npm run api-key` prints a new
 * key's secret once, with the entry to paste):
 *
 *   keys:
 *     - id: acme-prod
 *       tenant: acme
 *       sha256: 3f5c…(64 hex)
 *       role: user            # user | bench | admin
 *       requestsPerMinute: 600
 *       models: [llama-3-8b]  # optional: the only models it may name (its adapters come with it)
 */
const KeyFileEntry = ApiKeyRecord.extend({
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'must be the SHA-256 of the key, 64 lower-case hex characters'),
});
const KeyFile = z.strictObject({ keys: z.array(KeyFileEntry) });

export function loadKeyFile(path: string): FileKeys {
  const parsed = KeyFile.safeParse(readConfigFile(path));
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(
      `apiKeysFile ${path}: ${issue === undefined ? 'not valid' : `${issue.path.join('.') || '(top)'}: ${issue.message}`}`,
    );
  }
  const records = new Map<string, ApiKeyRecord>();
  const ids = new Set<string>();
  for (const { sha256, ...record } of parsed.data.keys) {
    if (ids.has(record.id) || records.has(sha256))
      throw new Error(`apiKeysFile ${path}: key ${record.id} appears twice (by id or by digest)`);
    ids.add(record.id);
    records.set(sha256, record);
  }
  return new FileKeys(records);
}
