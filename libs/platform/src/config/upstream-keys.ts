/**
 * The API keys a process sends to the engines it talks to (vLLM `--api-key`, or a gateway in front of an
 * engine): `Authorization: Bearer <key>`. Routers send them on proxied requests and model discovery,
 * health pollers on their scrapes; both build this from their own config, the same way.
 *
 * Where a key comes from: a file (its content, surrounding whitespace trimmed) or an environment
 * variable, both named in the operator's config — never the key itself as a config value, so that it
 * cannot be given as a flag (flags show in `ps`) and is not in the config file. Everything is read once,
 * at start; a named file that cannot be read, or an unset variable, fails the start (a fleet that
 * silently sends no key looks healthy and answers 401).
 *
 * Which backend gets which key, by its place (origin + API path, e.g. `http://10.0.0.5:8000`), never by
 * its id (an id can be re-bound to another URL through the admin API or the shared set in Redis):
 * 1. a backend of the config with its own `apiKeyFile`/`apiKeyEnv`: that key;
 * 2. any other backend of the config: the fleet key (`upstreamApiKeyFile`/`upstreamApiKeyEnv`), if any;
 * 3. a backend added at run time (admin API, the fleet's shared set): the fleet key only if
 *    `upstreamApiKeyForAddedBackends`, else none. Such a backend can name no file or variable itself, so
 *    whoever can add backends cannot make a process read a secret of its choosing and send it out.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The config fields of one backend's own key source, for the operator's backend entries only (never a
 * schema the admin API accepts: see above). One definition for the router and the health poller, so
 * one `kvroute.yaml` serves both.
 */
export const UPSTREAM_KEY_SOURCE_FIELDS = {
  apiKeyFile: z
    .string()
    .min(1)
    .optional()
    .describe('file holding the API key sent to this backend as `Authorization: Bearer` (vLLM `--api-key`)'),
  apiKeyEnv: z
    .string()
    .regex(ENV_NAME, 'must be an environment variable name')
    .optional()
    .describe('environment variable holding that key instead'),
};

/** The fleet key's config fields; `addedBackends` says which backends count as added at run time for this app. */
export function upstreamKeyConfigFields(addedBackends: string) {
  return {
    upstreamApiKeyFile: z
      .string()
      .min(1)
      .optional()
      .describe(
        'file holding the API key sent as `Authorization: Bearer` to every configured backend without ' +
          "its own `apiKeyFile`/`apiKeyEnv` (vLLM `--api-key`); a client's own `Authorization` is never " +
          'forwarded',
      ),
    upstreamApiKeyEnv: z
      .string()
      .regex(ENV_NAME, 'must be an environment variable name')
      .optional()
      .describe('name of the environment variable holding that key instead of a file'),
    upstreamApiKeyForAddedBackends: z
      .boolean()
      .default(false)
      .describe(`also send that key to ${addedBackends}: whoever can add a backend can then receive the key`),
  };
}

/** Where one key comes from; at most one of the two. */
export interface UpstreamKeySource {
  readonly apiKeyFile?: string | undefined;
  readonly apiKeyEnv?: string | undefined;
}

export interface UpstreamKeyConfig {
  readonly upstreamApiKeyFile?: string | undefined;
  readonly upstreamApiKeyEnv?: string | undefined;
  readonly upstreamApiKeyForAddedBackends: boolean;
  /** The configured backends: plain URLs or objects that may name their own key. */
  readonly backends: readonly (string | ({ readonly url: string } & UpstreamKeySource))[];
}

export interface UpstreamKeyReaders {
  /** The process environment (main.ts passes `process.env`). */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Reads a key file as UTF-8 (default: `readFileSync`). */
  readonly readFile?: (path: string) => string;
}

/** Thrown at start: the message names the file or variable, never a key. */
export class UpstreamKeyError extends Error {
  override readonly name = 'UpstreamKeyError';
}

/** A backend's place: origin plus API path, without trailing slashes or `/v1` (as the router's registry). */
export function upstreamPlaceOf(url: string): string {
  const parsed = new URL(url);
  return parsed.origin + parsed.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
}

/** The resolved keys; holds them in memory only (nothing here is serialisable: no toJSON, no enumerable keys). */
export class UpstreamKeys {
  readonly #byPlace: ReadonlyMap<string, string | null>;
  readonly #fleetKey: string | null;
  readonly #forAddedBackends: boolean;

  constructor(byPlace: ReadonlyMap<string, string | null>, fleetKey: string | null, forAddedBackends: boolean) {
    this.#byPlace = byPlace;
    this.#fleetKey = fleetKey;
    this.#forAddedBackends = forAddedBackends;
  }

  /** No key for any backend (open engines). */
  static none(): UpstreamKeys {
    return new UpstreamKeys(new Map(), null, false);
  }

  /** The key to send to the backend at `url`; null = send none. */
  keyFor(url: string): string | null {
    const place = upstreamPlaceOf(url);
    if (this.#byPlace.has(place)) return this.#byPlace.get(place) ?? this.#fleetKey;
    return this.#forAddedBackends ? this.#fleetKey : null;
  }

  /** `Authorization` header value for the backend at `url`; null = none. */
  authorizationFor(url: string): string | null {
    const key = this.keyFor(url);
    return key === null ? null : `Bearer ${key}`;
  }

  /** How many backends have a key of their own, and whether there is a fleet key: safe to log. */
  summary(): {
    readonly backendsWithOwnKey: number;
    readonly fleetKey: boolean;
    readonly fleetKeyForAddedBackends: boolean;
  } {
    return {
      backendsWithOwnKey: [...this.#byPlace.values()].filter((key) => key !== null).length,
      fleetKey: this.#fleetKey !== null,
      fleetKeyForAddedBackends: this.#forAddedBackends,
    };
  }
}

/** Reads every key the config names. @throws UpstreamKeyError naming the source that failed. */
export function loadUpstreamKeys(config: UpstreamKeyConfig, readers: UpstreamKeyReaders): UpstreamKeys {
  const readFile = readers.readFile ?? ((path: string) => readFileSync(path, 'utf8'));
  const read = (source: UpstreamKeySource, what: string): string | null => {
    if (source.apiKeyFile !== undefined && source.apiKeyEnv !== undefined)
      throw new UpstreamKeyError(`${what}: name a key file or an environment variable, not both`);
    if (source.apiKeyFile !== undefined) {
      let text: string;
      try {
        text = readFile(source.apiKeyFile);
      } catch (error) {
        throw new UpstreamKeyError(
          `${what}: cannot read the key file ${source.apiKeyFile} (${(error as { code?: string }).code ?? 'error'})`,
        );
      }
      return nonEmptyKey(text, `${what}: the key file ${source.apiKeyFile}`);
    }
    if (source.apiKeyEnv !== undefined)
      return nonEmptyKey(readers.env[source.apiKeyEnv] ?? '', `${what}: the environment variable ${source.apiKeyEnv}`);
    return null;
  };
  const fleetKey = read(
    { apiKeyFile: config.upstreamApiKeyFile, apiKeyEnv: config.upstreamApiKeyEnv },
    'upstreamApiKeyFile/upstreamApiKeyEnv',
  );
  const byPlace = new Map<string, string | null>();
  for (const entry of config.backends) {
    const backend = typeof entry === 'string' ? { url: entry } : entry;
    byPlace.set(upstreamPlaceOf(backend.url), read(backend, `backend ${backend.url}`));
  }
  return new UpstreamKeys(byPlace, fleetKey, config.upstreamApiKeyForAddedBackends);
}

function nonEmptyKey(text: string, what: string): string {
  const key = text.trim();
  if (key === '') throw new UpstreamKeyError(`${what} is empty or unset`);
  // A key goes into a header: a line break in it would split the request.
  if (/[\r\n\0]/.test(key)) throw new UpstreamKeyError(`${what} holds more than one line`);
  return key;
}
