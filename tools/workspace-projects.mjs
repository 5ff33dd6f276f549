// The workspace's project folders, read from the root package.json `workspaces` (folders and `folder/*`
// globs): what tools/check-code.mjs checks, tools/test-summary.mjs reports and vitest.config.ts runs.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Absolute paths of the project folders under `root` that have a package.json, in `workspaces` order.
 * @param {string} root the repository root
 * @returns {string[]}
 */
export function workspaceProjectDirs(root) {
  const { workspaces } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  return /** @type {string[]} */ (workspaces)
    .flatMap((entry) => {
      if (!entry.endsWith('/*')) return [join(root, entry)];
      const parent = join(root, entry.slice(0, -2));
      return readdirSync(parent, { withFileTypes: true })
        .filter((item) => item.isDirectory())
        .map((item) => join(parent, item.name));
    })
    .filter((dir) => existsSync(join(dir, 'package.json')));
}
