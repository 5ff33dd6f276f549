import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REQUEST_PATH_STAGES } from './request-path';

describe('the request path as documented', () => {
  it('lists in apps/router/README.md the stages of REQUEST_PATH_STAGES, in order, each with its file', () => {
    const readme = readFileSync(join(import.meta.dirname, '..', '..', 'README.md'), 'utf8');
    // Rows of the stage table: | 1 | **admit** | `pipeline/admit.ts` | …
    const rows = [...readme.matchAll(/^\| (\d) \| \*\*(\w+)\*\* \| `(pipeline\/[\w-]+\.ts)`/gm)];
    expect(rows.map((row) => row[2])).toEqual([...REQUEST_PATH_STAGES]);
    for (const row of rows) {
      expect(existsSync(join(import.meta.dirname, '..', row[3] as string)), row[3]).toBe(true);
      expect(row[3]).toBe(`pipeline/${row[2]}.ts`);
    }
  });
});
