import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderConfigMarkdown } from '@kvroute/platform';
import { describe, expect, it } from 'vitest';
import { renderPollerConfigDoc } from './config';

describe('docs/configuration.md', () => {
  it('documents the current poller config schema (run `npm run docs:config` if this fails)', () => {
    const doc = readFileSync(join(import.meta.dirname, '..', '..', '..', 'docs', 'configuration.md'), 'utf8');
    expect(doc).toContain(renderPollerConfigDoc(renderConfigMarkdown));
  });
});
