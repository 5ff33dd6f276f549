import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** One key of a test's key file (docs/security.md "Tenants"): `extra` is more YAML lines of that key, indented 4. */
export interface TestKeyEntry {
  readonly id: string;
  readonly tenant: string;
  /** sha256 of the key (`generateApiKey().digest`). */
  readonly digest: string;
  readonly extra?: string;
}

/** Writes an `apiKeysFile` in a fresh temporary folder; `remove` deletes the folder. */
export function writeTestKeyFile(entries: readonly TestKeyEntry[]): { readonly file: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-keys-'));
  const file = join(dir, 'keys.yaml');
  const lines = entries.map(
    (entry) => `  - id: ${entry.id}\n    tenant: ${entry.tenant}\n    sha256: ${entry.digest}\n${entry.extra ?? ''}`,
  );
  writeFileSync(file, ['keys:', ...lines].join('\n'));
  return { file, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
