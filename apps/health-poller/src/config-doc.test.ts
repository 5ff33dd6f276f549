import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { findLenientObjects, KVROUTE_FILE_KEYS, renderConfigMarkdown } from '@kvroute/platform';
import { describe, expect, it } from 'vitest';
import { renderPollerConfigDoc, PollerConfig } from './config';

describe('docs/configuration.md', () => {
  it('documents the current poller config schema (run `npm run docs:config` if this fails)', () => {
    const doc = readFileSync(join(import.meta.dirname, '..', '..', '..', 'docs', 'configuration.md'), 'utf8');
    expect(doc).toContain(renderPollerConfigDoc(renderConfigMarkdown));
  });
});

describe('strict config (issue 31)', () => {
  it('has no nested mapping that would drop an unknown key silently (use z.strictObject)', () => {
    expect(findLenientObjects(PollerConfig)).toEqual([]);
  });

  it('is listed in KVROUTE_FILE_KEYS, which the other app reads the shared kvroute.yaml with (run `npm run docs:config` if this fails)', () => {
    expect(KVROUTE_FILE_KEYS.poller).toEqual(Object.keys(PollerConfig.shape));
  });
});
