import { ConfigError, readableIssueMap, readConfigFile, type ConfigProblem } from '@kvroute/platform';
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

/**
 * @throws ConfigError listing every bad entry, one line each (a file of many keys is fixed in one go, not one
 * start per mistake).
 */
export function loadKeyFile(path: string): FileKeys {
  const raw = readConfigFile(path);
  const parsed = KeyFile.safeParse(raw, { error: readableIssueMap() });
  if (!parsed.success) throw new ConfigError(parsed.error.issues.map((issue) => keyFileProblem(issue, raw, path)));
  const records = new Map<string, ApiKeyRecord>();
  const ids = new Set<string>();
  const problems: ConfigProblem[] = [];
  parsed.data.keys.forEach(({ sha256, ...record }, index) => {
    if (ids.has(record.id) || records.has(sha256)) {
      problems.push({
        path: `keys.${index}`,
        message: `key ${record.id} appears twice (by id or by digest)`,
        source: { kind: 'file', path },
      });
      return;
    }
    ids.add(record.id);
    records.set(sha256, record);
  });
  if (problems.length > 0) throw new ConfigError(problems);
  return new FileKeys(records);
}

/** A zod issue as a problem line, naming the entry's id when it has one: `keys.3.sha256 … (key acme-prod)`. */
function keyFileProblem(issue: z.core.$ZodIssue, raw: Record<string, unknown>, path: string): ConfigProblem {
  const [top, index] = issue.path;
  const entries = raw['keys'];
  const entry = top === 'keys' && typeof index === 'number' && Array.isArray(entries) ? entries[index] : undefined;
  const id = entry !== null && typeof entry === 'object' ? (entry as { id?: unknown }).id : undefined;
  return {
    path: issue.path.length === 0 ? '(top)' : issue.path.map(String).join('.'),
    message: typeof id === 'string' ? `${issue.message} (key ${id})` : issue.message,
    source: { kind: 'file', path },
  };
}
