import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { findLenientObjects, renderConfigMarkdown } from '@kvroute/platform';
import { describe, expect, it } from 'vitest';
import { renderSimConfigDoc, SimConfig } from './config';

describe('docs/configuration.md', () => {
  it('documents the current simulator config schema (run `npm run docs:config` if this fails)', () => {
    const doc = readFileSync(join(import.meta.dirname, '..', '..', '..', 'docs', 'configuration.md'), 'utf8');
    expect(doc).toContain(renderSimConfigDoc(renderConfigMarkdown));
  });
});

describe('strict config (issue 31)', () => {
  it('has no nested mapping that would drop an unknown key silently (use z.strictObject)', () => {
    expect(findLenientObjects(SimConfig)).toEqual([]);
  });
});
