import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * HAProxy in front of router processes, for the tests of the deployment shape (replicas behind a TCP
 * load balancer). HAProxy is not an npm dependency: only system tests (`*.system.test.ts`, run by
 * `npm run test:system`, which installs it) use this kit.
 */
export const HAPROXY = '/usr/sbin/haproxy';

export interface HaproxyOptions {
  /** Connection attempts per request; with `option redispatch 1` each retry may go to another server. */
  readonly retries: number;
  /** Added to the `defaults` section after the timeouts, e.g. `timeout check` for HTTP health checks. */
  readonly defaults?: readonly string[];
  /** The frontend, backend and listen sections, one config line per entry. */
  readonly sections: readonly string[];
}

export interface RunningHaproxy {
  /** Kills HAProxy (SIGKILL: the test is over, nothing to drain) and removes its config directory. */
  stop(): void;
}

/**
 * Starts HAProxy in the foreground (`-db`) on a config written to a fresh temp directory. Every test
 * shares the TCP-mode `global`/`defaults` preamble: the routers speak HTTP themselves, so HAProxy only
 * picks a server per connection, and 60 s client/server timeouts outlast any streamed response.
 */
export function startHaproxy(options: HaproxyOptions): RunningHaproxy {
  if (spawnSync(HAPROXY, ['-v']).status !== 0)
    throw new Error(`${HAPROXY} does not run: install haproxy (npm run test:system does)`);
  const configDir = mkdtempSync(join(tmpdir(), 'kvroute-haproxy-'));
  const configPath = join(configDir, 'haproxy.cfg');
  const config = [
    'global',
    '  maxconn 1024',
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    '  timeout client 60s',
    '  timeout server 60s',
    ...(options.defaults ?? []),
    `  retries ${options.retries}`,
    '  option redispatch 1',
    ...options.sections,
    '',
  ].join('\n');
  writeFileSync(configPath, config);
  const child = spawn(HAPROXY, ['-db', '-f', configPath], { stdio: 'ignore' });
  return {
    stop() {
      child.kill('SIGKILL');
      rmSync(configDir, { recursive: true, force: true });
    },
  };
}
