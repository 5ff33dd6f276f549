import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { POLICY_NAMES } from '@kvroute/routing';
import { describe, expect, it } from 'vitest';

/**
 * Docs that cannot drift silently: each check reads the tree (or the code) and the document that
 * claims to describe it, and fails on what the document leaves out or miscounts.
 */
const ROUTER = join(import.meta.dirname, '..');
const REPOSITORY = join(ROUTER, '..', '..');
const DOCS = join(REPOSITORY, 'docs');

const read = (path: string): string => readFileSync(path, 'utf8');

/** Every file under `folder` (recursively), as paths relative to it with `/` separators. */
function filesUnder(folder: string): string[] {
  return readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(folder, join(entry.parentPath, entry.name)).split('\\').join('/'));
}

/** The targets of a Markdown document's inline links, `[text](target)`, without `#anchors`. */
function linkTargets(markdown: string): Set<string> {
  return new Set([...markdown.matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)].map((match) => match[1] as string));
}

describe('docs/README.md', () => {
  it('links every Markdown document under docs/, ADRs included', () => {
    const links = linkTargets(read(join(DOCS, 'README.md')));
    const documents = filesUnder(DOCS).filter((path) => path.endsWith('.md') && path !== 'README.md');
    expect(documents.length).toBeGreaterThan(8);
    expect(documents.filter((path) => !links.has(path))).toEqual([]);
  });

  it('links only documents that exist', () => {
    const links = [...linkTargets(read(join(DOCS, 'README.md')))].filter((target) => !/^[a-z]+:/.test(target));
    expect(links.filter((target) => !existsSync(join(DOCS, target)))).toEqual([]);
  });

  it('and docs/adr/README.md lists every ADR', () => {
    const links = linkTargets(read(join(DOCS, 'adr', 'README.md')));
    const records = filesUnder(join(DOCS, 'adr')).filter((path) => /^\d{4}-.*\.md$/.test(path));
    expect(records.length).toBeGreaterThan(0);
    expect(records.filter((path) => !links.has(path))).toEqual([]);
  });
});

describe("the router README's module map", () => {
  const readme = read(join(ROUTER, 'README.md'));
  const start = readme.indexOf('## Module map');
  const end = readme.indexOf('\n## ', start + 1);
  const map = readme.slice(start, end === -1 ? undefined : end);
  const sources = filesUnder(join(ROUTER, 'src')).filter((path) => path.endsWith('.ts') && !path.endsWith('.test.ts'));

  it('has a row for every folder under src/', () => {
    expect(start).toBeGreaterThan(-1);
    const folders = [...new Set(sources.filter((path) => path.includes('/')).map((path) => path.split('/')[0]))];
    expect(folders.length).toBeGreaterThan(5);
    expect(folders.filter((folder) => !map.includes(`| \`src/${folder}/\` |`))).toEqual([]);
  });

  it('names every source file under src/ (top-level files by path, the others in their folder row)', () => {
    const unnamed = sources.filter((path) => {
      if (!path.includes('/')) return !map.includes(`| \`src/${path}\` |`);
      const [folder, ...rest] = path.split('/');
      const row = map.split('\n').find((line) => line.startsWith(`| \`src/${folder}/\` |`)) ?? '';
      return !row.includes(`\`${rest.join('/')}\``);
    });
    expect(unnamed).toEqual([]);
  });
});

describe('the root README', () => {
  it("counts and names the router's policies as the policy registry lists them", () => {
    const readme = read(join(REPOSITORY, 'README.md'));
    const claim = /the router: (\d+) policies \(([^)]*)\)/.exec(readme);
    expect(claim, 'the README says "the router: N policies (…)"').not.toBeNull();
    expect(Number(claim?.[1])).toBe(POLICY_NAMES.length);
    const named = [...(claim?.[2] ?? '').matchAll(/`(\w+)`/g)].map((match) => match[1]);
    expect([...named].sort()).toEqual([...POLICY_NAMES].sort());
  });
});
