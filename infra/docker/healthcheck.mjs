// HEALTHCHECK of the kvroute image: GET the running app's liveness path on loopback, exit 0 on 2xx.
// The app, its flags and env are read from the process running entrypoint.mjs beside this file (PID 1
// in a container), so one HEALTHCHECK serves every app; `healthcheck.mjs APP [flags…]` names it
// instead. Port: --port flag, else <PREFIX>PORT, else the app's default. A port set only in a
// --config file is not seen: set ports by flag or env in containers.
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { resolveApp } from './apps.mjs';

const entrypoint = fileURLToPath(new URL('./entrypoint.mjs', import.meta.url));

/**
 * argv after the entry script and env of the process running entrypoint.mjs, PID 1 first.
 * @returns {{ args: string[], env: Record<string, string | undefined> } | null}
 */
function runningApp() {
  const pids = ['1', ...readdirSync('/proc').filter((entry) => /^\d+$/.test(entry) && entry !== '1')];
  for (const pid of pids) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      const at = argv.indexOf(entrypoint);
      if (at < 0) continue;
      const env = Object.fromEntries(
        readFileSync(`/proc/${pid}/environ`, 'utf8')
          .split('\0')
          .filter((pair) => pair.includes('='))
          .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
      );
      return { args: argv.slice(at + 1).filter((arg) => arg !== ''), env };
    } catch {
      // gone, or not ours to read
    }
  }
  return null;
}

/**
 * @param {readonly string[]} args
 * @param {string} flag
 * @returns {string | undefined}
 */
function flagValue(args, flag) {
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i] ?? '';
    if (arg === flag) return args[i + 1];
    if (arg.startsWith(`${flag}=`)) return arg.slice(flag.length + 1);
  }
  return undefined;
}

const target = process.argv.length > 2 ? { args: process.argv.slice(2), env: process.env } : runningApp();
const resolved = resolveApp(target?.args[0]);
if (target === null || resolved === undefined || resolved.app.healthPath === undefined) {
  process.stderr.write(
    `healthcheck: no kvroute app with a health endpoint found (${target === null ? 'no entrypoint.mjs process' : target.args[0]})\n`,
  );
  process.exit(1);
}
const { name, app } = resolved;
const port = flagValue(target.args, '--port') || target.env[`${app.envPrefix}PORT`] || String(app.defaultPort);
try {
  const response = await fetch(`http://127.0.0.1:${port}${app.healthPath}`, { signal: AbortSignal.timeout(2_000) });
  if (!response.ok) process.stderr.write(`healthcheck: ${name} answered ${response.status}\n`);
  process.exit(response.ok ? 0 : 1);
} catch (error) {
  process.stderr.write(
    `healthcheck: ${name} on port ${port}: ${error instanceof Error ? error.message : String(error)}\n`,
  );
  process.exit(1);
}
