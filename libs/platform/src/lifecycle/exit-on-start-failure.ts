import { ConfigError } from '../config/config-error';

/**
 * How a process that failed to start says so: one line per problem on stderr, each prefixed with the command, and
 * exit code 2 for a configuration the user got wrong (the shell's usage error, so scripts can tell it from a crash),
 * 1 for anything else. Never a stack trace: the message is written to be read by whoever started the process.
 */
export function exitOnStartFailure(command: string, error: unknown): never {
  const message = error instanceof Error ? error.message : String(error);
  const lines = message.split('\n').filter((line) => line.trim() !== '');
  process.stderr.write(lines.map((line) => `${command}: ${line}\n`).join(''));
  process.exit(error instanceof ConfigError ? 2 : 1);
}
