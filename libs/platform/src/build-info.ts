import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/**
 * Which kvroute this process is: the release version and the git commit it was built from, for
 * `--version`, `GET /version` and the `kvroute_build_info` gauge, so an operator can tell which build
 * answered.
 *
 * A bundle (`npm run build`, the image, the packed `kvroute` package) has both written in at build
 * time (tools/build.ts defines `__KVROUTE_BUILD__`). From the sources (tsx), the version is the root
 * package.json's and the commit is read from the checkout's `.git` (no `git` process is spawned);
 * `KVROUTE_COMMIT` overrides it either way (an image built without `.git` passes it as a build arg).
 */
export interface BuildInfo {
  readonly version: string;
  /** Full commit id, or `unknown`. */
  readonly commit: string;
}

declare const __KVROUTE_BUILD__: BuildInfo | undefined;

let cached: BuildInfo | null = null;

export function buildInfo(env: Readonly<Record<string, string | undefined>> = process.env): BuildInfo {
  if (cached === null)
    cached =
      typeof __KVROUTE_BUILD__ === 'undefined' ? fromCheckout(findRepoRoot(import.meta.dirname)) : __KVROUTE_BUILD__;
  const commit = env['KVROUTE_COMMIT'];
  return commit !== undefined && /^[0-9a-f]{7,40}$/.test(commit) ? { ...cached, commit } : cached;
}

/** `kvroute 0.2.0 (commit 1a2b3c4d5e6f)`. */
export function versionLine(info: BuildInfo): string {
  return `kvroute ${info.version} (commit ${info.commit === 'unknown' ? 'unknown' : info.commit.slice(0, 12)})`;
}

/** The folder holding the workspace root package.json (the one with `workspaces`), or null. */
function findRepoRoot(from: string): string | null {
  for (let dir = from; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && 'workspaces' in (JSON.parse(readFileSync(manifest, 'utf8')) as object)) return dir;
    if (dirname(dir) === dir) return null;
  }
}

/** Version and commit of a checkout (its package.json and .git), what can be read of them. */
export function fromCheckout(root: string | null): BuildInfo {
  if (root === null) return { version: '0.0.0', commit: 'unknown' };
  const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: string };
  return { version: version ?? '0.0.0', commit: commitOf(join(root, '.git')) };
}

/**
 * HEAD's commit id from a `.git` (a folder, or a worktree's file pointing at its own folder, whose
 * branch refs live in the common folder), without spawning git. `unknown` when any of it is missing.
 */
function commitOf(dotGit: string): string {
  try {
    const gitDir = statSync(dotGit).isFile()
      ? resolve(
          dirname(dotGit),
          readFileSync(dotGit, 'utf8')
            .replace(/^gitdir:\s*/, '')
            .trim(),
        )
      : dotGit;
    const head = readFileSync(join(gitDir, 'HEAD'), 'utf8').trim();
    if (!head.startsWith('ref: ')) return head;
    const ref = head.slice('ref: '.length);
    const commonFile = join(gitDir, 'commondir');
    const commonDir = existsSync(commonFile) ? resolve(gitDir, readFileSync(commonFile, 'utf8').trim()) : gitDir;
    for (const dir of [gitDir, commonDir]) {
      const loose = join(dir, ref);
      if (existsSync(loose)) return readFileSync(loose, 'utf8').trim();
    }
    const packed = join(commonDir, 'packed-refs');
    if (!existsSync(packed)) return 'unknown';
    for (const line of readFileSync(packed, 'utf8').split('\n')) {
      const [id, name] = line.split(' ');
      if (name === ref && id !== undefined) return id;
    }
    return 'unknown';
  } catch {
    return 'unknown';
  }
}
