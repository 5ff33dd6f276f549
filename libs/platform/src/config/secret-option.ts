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
