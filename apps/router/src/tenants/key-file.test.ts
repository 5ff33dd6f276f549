import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@kvroute/platform';
import { afterAll, describe, expect, it } from 'vitest';
import { loadKeyFile } from './key-file';

const dir = mkdtempSync(join(tmpdir(), 'router-key-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const DIGEST = 'a'.repeat(64);

function keyFile(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

function loadError(path: string): ConfigError {
  try {
    loadKeyFile(path);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('the key file loaded');
}

describe('the API-key file (issue 31: every bad entry, not only the first)', () => {
  it('reports each bad entry on its own line, naming its place, its id and what was expected', () => {
    const path = keyFile(
      'keys.yaml',
      [
        'keys:',
        '  - id: good',
        '    tenant: acme',
        `    sha256: ${DIGEST}`,
        '  - id: short-digest',
        '    tenant: acme',
        '    sha256: abc123',
        '  - id: bad-role',
        '    tenant: acme',
        '    role: boss',
        `    sha256: ${'b'.repeat(64)}`,
        '  - id: typo',
        '    tenant: acme',
        '    requestsPerMinte: 600',
        `    sha256: ${'c'.repeat(64)}`,
        '',
      ].join('\n'),
    );
    expect(loadError(path).message.split('\n')).toEqual([
      `keys.1.sha256 in ${path}: must be the SHA-256 of the key, 64 lower-case hex characters (key short-digest)`,
      `keys.2.role in ${path}: "boss" is not one of user, bench, admin (key bad-role)`,
      `keys.3 in ${path}: unknown key "requestsPerMinte" (did you mean "requestsPerMinute"?) (key typo)`,
    ]);
  });

  it('reports every duplicate, not only the first', () => {
    const entry = (id: string, digest: string) => `  - id: ${id}\n    tenant: t\n    sha256: ${digest}\n`;
    const path = keyFile(
      'duplicates.yaml',
      `keys:\n${entry('a', DIGEST)}${entry('a', 'd'.repeat(64))}${entry('b', 'e'.repeat(64))}${entry('c', 'e'.repeat(64))}`,
    );
    expect(loadError(path).problems.map((problem) => problem.path)).toEqual(['keys.1', 'keys.3']);
  });

  it('loads a good file', () => {
    const path = keyFile('fine.yaml', `keys:\n  - id: k1\n    tenant: acme\n    sha256: ${DIGEST}\n`);
    expect(() => loadKeyFile(path)).not.toThrow();
  });
});
