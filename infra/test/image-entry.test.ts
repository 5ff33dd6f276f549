/**
 * The runtime image without Docker: the same bundles (`tools/build.ts`, as `npm run build` in the
 * Dockerfile) laid out as in /app (entry scripts beside dist/), started through entrypoint.mjs and
 * probed by healthcheck.mjs, as the container's ENTRYPOINT and HEALTHCHECK do.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApps } from '../../tools/build';
import { repoPath } from './stack-files';

const image = mkdtempSync(join(tmpdir(), 'kvroute-image-'));
const started: ChildProcess[] = [];

beforeAll(async () => {
  await buildApps(['router', 'health-poller', 'vllm-sim'], join(image, 'dist'));
  for (const file of ['apps.mjs', 'entrypoint.mjs', 'healthcheck.mjs'])
    copyFileSync(repoPath('infra/docker', file), join(image, file));
}, 120_000);

afterAll(() => {
  for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
  rmSync(image, { recursive: true, force: true });
});

/** The environment of a container: no KVROUTE_* from the test run's own shell. */
function containerEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('KVROUTE_')));
  return { ...env, ...extra };
}

function run(script: string, args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [join(image, script), ...args], {
    env: containerEnv(env),
    encoding: 'utf8',
    timeout: 30_000,
  });
}

function start(args: string[], env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, ['--enable-source-maps', join(image, 'entrypoint.mjs'), ...args], {
    env: containerEnv(env),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  started.push(child);
  return child;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function eventually(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`timed out waiting until ${what}`);
}

async function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  return exited;
}

describe('image entry point (entrypoint.mjs)', () => {
  it('prints the usage and exits 64 without an app or with an unknown one', () => {
    const none = run('entrypoint.mjs', []);
    expect(none.status).toBe(64);
    expect(none.stderr).toMatch(/router \| poller \| sim \| bench/);
    const unknown = run('entrypoint.mjs', ['balancer']);
    expect(unknown.status).toBe(64);
    expect(unknown.stderr).toMatch(/unknown app "balancer"/);
  });

  it('hands the remaining flags to the app (poller --help, under its package name too)', () => {
    for (const name of ['poller', 'health-poller']) {
      const help = run('entrypoint.mjs', [name, '--help']);
      expect(help.status, help.stderr).toBe(0);
      expect(help.stdout).toMatch(/--redis-url/);
    }
  });

  it('says which build target has the bench instead of failing obscurely', () => {
    const bench = run('entrypoint.mjs', ['bench', '--help']);
    expect(bench.status).toBe(64);
    expect(bench.stderr).toMatch(/--target bench/);
  });

  it('runs a sim and a router; the HEALTHCHECK finds the running app, its port, and fails when nothing answers', async () => {
    const simPort = await freePort();
    const sim = start(['sim'], {
      KVROUTE_SIM_HOST: '127.0.0.1',
      KVROUTE_SIM_PORT: String(simPort),
      KVROUTE_SIM_PROFILE: 'fast',
      KVROUTE_SIM_LOG_LEVEL: 'warn',
    });
    // No argument: the healthcheck reads the app and its env from the process running entrypoint.mjs.
    await eventually(() => run('healthcheck.mjs', []).status === 0, 'the sim is healthy');

    const routerPort = await freePort();
    // A free ops port too: the default (9464) is the poller's as well, and may be taken on a shared host.
    const opsPort = await freePort();
    const router = start(
      ['router', '--port', String(routerPort), '--ops-port', String(opsPort), '--host', '127.0.0.1'],
      {
        KVROUTE_BACKENDS: `http://127.0.0.1:${simPort}`,
        KVROUTE_LOG_LEVEL: 'warn',
      },
    );
    await eventually(
      () => run('healthcheck.mjs', ['router', '--port', String(routerPort)]).status === 0,
      'the router is alive',
    );
    // What HAProxy checks: ready once the router knows the sim's model.
    await eventually(
      async () => (await fetch(`http://127.0.0.1:${routerPort}/readyz`).catch(() => null))?.status === 200,
      'the router is ready',
    );

    const closedPort = await freePort();
    const down = run('healthcheck.mjs', ['sim'], { KVROUTE_SIM_PORT: String(closedPort) });
    expect(down.status).toBe(1);
    expect(down.stderr).toMatch(/healthcheck: sim on port/);

    // SIGTERM reaches the app itself (no shell in between): a clean exit.
    expect(await stop(router)).toBe(0);
    expect(await stop(sim)).toBe(0);
  }, 60_000);
});
