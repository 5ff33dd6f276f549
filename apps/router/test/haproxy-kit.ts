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

/**
 * HAProxy connects to the routers from this loopback address, starting every connection (health checks
 * included) with a PROXY protocol v2 header naming the real client, as the shipped config does
 * (infra/haproxy/haproxy.cfg). A test's own direct connections come from 127.0.0.1, so they stay plain.
 */
export const HAPROXY_SOURCE_ADDRESS = '127.0.0.9';

/** The router flags that take PROXY headers from this kit's HAProxy (and from nobody else). */
export const ROUTER_PROXY_PROTOCOL_ARGS: readonly string[] = ['--proxy-protocol-from', HAPROXY_SOURCE_ADDRESS];

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
 * picks a server per connection, and 60 s client/server timeouts outlast any streamed response. Every
 * server gets `send-proxy-v2` from `HAPROXY_SOURCE_ADDRESS`: start the routers with
 * `ROUTER_PROXY_PROTOCOL_ARGS`.
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
    `  source ${HAPROXY_SOURCE_ADDRESS}`,
    '  default-server send-proxy-v2',
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
