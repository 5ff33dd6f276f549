/**
 * Secret options: settable from the environment or a config file, never from a command-line flag, because a
 * process's arguments are readable by every local user (`ps`, /proc/<pid>/cmdline) and end up in shell history.
 * The mark lives in the schema (one schema, no side table), so the loader, `--help` and the generated docs agree.
 */
import { z } from 'zod';

/** Why the flag is refused: the loader quotes it in its error. */
const secretOptions = z.registry<{ flagRefusedBecause: string }>();

const DEFAULT_REASON =
  'command-line arguments are visible to every local user (ps, /proc/<pid>/cmdline) and stay in shell history';

/** Marks a top-level config field as secret: its `--flag` is refused with `reason`; env and file still set it. */
export function secretOption<T extends z.core.$ZodType>(field: T, reason: string = DEFAULT_REASON): T {
  secretOptions.add(field, { flagRefusedBecause: reason });
  return field;
}

/** The reason a field's flag is refused, or undefined for an ordinary field. */
export function flagRefusedBecause(field: z.core.$ZodType): string | undefined {
  return secretOptions.get(field)?.flagRefusedBecause;
}

/**
 * URL options whose value may carry a password (`redis://:pw@host`, `redis://user:pw@host`, `?password=`):
 * the flag is accepted for a URL without one (`--redis-url redis://redis:6379` is common and harmless), and
 * refused, without echoing the value, for a URL with one. Env and file still take any URL.
 */
const urlSecretOptions = z.registry<{ secretInUrl: true }>();

/** Marks a top-level URL field: its `--flag` is refused when the URL carries a password. */
export function urlWithSecretOffFlags<T extends z.core.$ZodType>(field: T): T {
  urlSecretOptions.add(field, { secretInUrl: true });
  return field;
}

/** Whether a field's flag refuses URLs that carry a password. */
export function refusesSecretInUrlFlag(field: z.core.$ZodType): boolean {
  return urlSecretOptions.get(field)?.secretInUrl === true;
}

/**
 * Whether a URL (one, or a cluster URL of several hosts) carries a password: a non-empty password in its
 * user info, or a `password` query parameter. Parsed by hand: a cluster URL's host list is no WHATWG URL.
 */
export function urlCarriesSecret(raw: string): boolean {
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(raw)?.[1] ?? '';
  const at = authority.lastIndexOf('@');
  if (at !== -1) {
    const userInfo = authority.slice(0, at);
    const colon = userInfo.indexOf(':');
    if (colon !== -1 && colon < userInfo.length - 1) return true;
  }
  return /[?&]password=[^&#]/i.test(raw);
}

export const SECRET_IN_URL_REASON =
  'a password in a URL on the command line is visible to every local user (ps, /proc/<pid>/cmdline) ' +
  'and stays in shell history';
