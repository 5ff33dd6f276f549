import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freePorts } from './local-sims';

/**
 * The proxies under test in the overhead benchmark, each as its own process (optionally pinned to a
 * core with taskset, which execs, so the pid is the proxy's own): the bare Node proxy, kvroute
 * (apps/router, on local state or with `--redis-url`) and HAProxy in TCP mode.
 */
export interface ProxyProcess {
  readonly name: string;
  readonly url: string;
  /** Where a kvroute router serves /metrics (its ops listener); absent for the other proxies. */
  readonly metricsUrl?: string;
  readonly process: ChildProcess;
  /** Last lines the process wrote (stdout and stderr), for error notes. */
  output(): string;
  /** Why it is not running, or undefined while it is. */
  exited(): string | undefined;
  stop(): Promise<void>;
}

const repoRoot = join(import.meta.dirname, '..', '..');
const OUTPUT_TAIL_CHARS = 4_000;

export interface StartOptions {
  readonly pinToCore?: number;
  readonly readyTimeoutMs?: number;
}

function spawnPinned(
  command: string,
  args: readonly string[],
  pinToCore: number | undefined,
  env: NodeJS.ProcessEnv = process.env,
): ChildProcess {
  return pinToCore === undefined
    ? spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env })
    : spawn('taskset', ['-c', String(pinToCore), command, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
}

function manage(name: string, url: string, child: ChildProcess, cleanup: () => void = () => undefined): ProxyProcess {
  let tail = '';
  const keep = (chunk: Buffer): void => {
    tail = (tail + chunk.toString('utf8')).slice(-OUTPUT_TAIL_CHARS);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let spawnError: Error | undefined;
  child.on('error', (error) => (spawnError = error));
  return {
    name,
    url,
    process: child,
    output: () => tail.trim(),
    exited: () => {
      if (spawnError) return `could not start: ${spawnError.message}`;
      if (child.exitCode !== null) return `exited with code ${child.exitCode}`;
      if (child.signalCode !== null) return `killed by ${child.signalCode}`;
      return undefined;
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null && !spawnError) {
        const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        child.kill('SIGTERM');
        const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(killer);
      }
      cleanup();
    },
  };
}

/** Waits until `ready()` is true; fails early, with the process's output, if the process exits. */
async function waitReady(proxy: ProxyProcess, ready: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const exited = proxy.exited();
    if (exited) {
      await proxy.stop();
      throw new Error(`${proxy.name} ${exited}${proxy.output() ? `: ${lastLines(proxy.output(), 12)}` : ''}`);
    }
    if (await ready()) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await proxy.stop();
  throw new Error(
    `${proxy.name} not ready after ${timeoutMs / 1000} s${proxy.output() ? `: ${lastLines(proxy.output(), 12)}` : ''}`,
  );
}

export function lastLines(text: string, count: number): string {
  return text.split('\n').slice(-count).join('\n');
}

async function httpOk(url: string): Promise<boolean> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
    await response.arrayBuffer();
    return response.ok;
  } catch {
    return false;
  }
}

function tcpOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Node arguments that run an app: its production bundle from `npm run build` when present (what the
 * overhead benchmark measures, after building), else its TypeScript source under tsx (tests).
 */
export function nodeEntry(bundle: string, source: string): string[] {
  const bundlePath = join(repoRoot, bundle);
  return existsSync(bundlePath) ? [bundlePath] : ['--import', 'tsx', join(repoRoot, source)];
}

/**
 * Builds the production bundles of the checkout at `root` (`npm run build`), so what nodeEntry starts is
 * this tree's code: a bundle left by an earlier build would otherwise run instead of the sources.
 */
export function buildBundles(root = repoRoot): void {
  const built = spawnSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
  if (built.status !== 0) throw new Error(`npm run build failed in ${root}`);
}

/** The bare proxy, built like the router (see nodeEntry). */
export async function startBareProxyProcess(upstream: string, options: StartOptions = {}): Promise<ProxyProcess> {
  const port = await freePort();
  const child = spawnPinned(
    process.execPath,
    [
      ...nodeEntry('dist/bare-proxy.mjs', 'bench/src/bare-proxy-main.ts'),
      '--upstream',
      upstream,
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
    ],
    options.pinToCore,
  );
  const proxy = manage('bare proxy', `http://127.0.0.1:${port}`, child);
  await waitReady(proxy, () => tcpOpen(port), options.readyTimeoutMs ?? 30_000);
  return proxy;
}

/**
 * apps/router as deployed: `node dist/router.mjs` (see nodeEntry), of this checkout or of `checkout`. With `redisUrl`, the router keeps its
 * routing state in that Redis (`--redis-url`) and is named `kvroute + Redis`; ready either way once
 * `/readyz` answers 200 (the router connects to Redis, 2 s at most, before it listens).
 */
export async function startRouterProcess(
  backend: string,
  options: StartOptions & { redisUrl?: string; checkout?: string; extraArgs?: readonly string[] } = {},
): Promise<ProxyProcess> {
  const [port, opsPort] = (await freePorts(2)) as [number, number];
  const args = [
    // `checkout`: another working tree's production bundle (the overhead benchmark's --baseline).
    ...(options.checkout === undefined
      ? nodeEntry('dist/router.mjs', 'apps/router/src/main.ts')
      : [join(options.checkout, 'dist', 'router.mjs')]),
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    // '' when every backend comes from other flags (--prefill-backends and --decode-backends).
    ...(backend === '' ? [] : ['--backends', backend]),
    '--policy',
    'cacheaware',
    '--log-level',
    'warn',
    ...(options.redisUrl === undefined ? [] : ['--redis-url', options.redisUrl]),
    ...(options.extraArgs ?? []),
  ];
  // The ops port by env, not flag: a baseline checkout from before the ops listener ignores the variable
  // (it would refuse an unknown flag), and serves /metrics on its public port instead.
  const env = { ...process.env, KVROUTE_OPS_PORT: String(opsPort) };
  const child = spawnPinned(process.execPath, args, options.pinToCore, env);
  const name =
    (options.redisUrl === undefined ? 'kvroute' : 'kvroute + Redis') +
    (options.checkout === undefined ? '' : ', baseline') +
    (options.extraArgs === undefined ? '' : ' (+ options)');
  const proxy = manage(name, `http://127.0.0.1:${port}`, child);
  await waitReady(proxy, () => httpOk(`http://127.0.0.1:${port}/readyz`), options.readyTimeoutMs ?? 60_000);
  const opsUrl = `http://127.0.0.1:${opsPort}`;
  return { ...proxy, metricsUrl: (await httpOk(`${opsUrl}/metrics`)) ? opsUrl : proxy.url };
}

export const HAPROXY_PATH = '/usr/sbin/haproxy';

/** haproxy -v's first line, or undefined when HAProxy is not installed. */
export function haproxyVersion(path = HAPROXY_PATH): string | undefined {
  const result = spawnSync(path, ['-v'], { encoding: 'utf8' });
  if (result.status !== 0 || result.error) return undefined;
  return result.stdout.split('\n')[0]?.trim();
}

/**
 * HAProxy's address towards the routers when it sends PROXY protocol (`proxyProtocol`): start the
 * routers with `--proxy-protocol-from` it (`ROUTER_PROXY_PROTOCOL_FLAGS`). The bench's own connections
 * to a router (readiness, metrics) come from 127.0.0.1 and stay plain.
 */
export const BENCH_HAPROXY_SOURCE = '127.0.0.9';
export const ROUTER_PROXY_PROTOCOL_FLAGS: readonly string[] = ['--proxy-protocol-from', BENCH_HAPROXY_SOURCE];

export interface HaproxyConfigOptions {
  /** Start each connection to a server with a PROXY v2 header naming the client, from `BENCH_HAPROXY_SOURCE` (as the shipped config does). */
  readonly proxyProtocol?: boolean;
}

/**
 * A TCP pass-through: no HTTP parsing at all, one upstream connection per client connection. With
 * several servers (router replicas, as the L4 balancer in front of them), connections go round-robin.
 */
export function haproxyConfig(
  listenPort: number,
  backendHostPorts: string | readonly string[],
  options: HaproxyConfigOptions = {},
): string {
  const servers = typeof backendHostPorts === 'string' ? [backendHostPorts] : backendHostPorts;
  return [
    'global',
    '  nbthread 1',
    '  maxconn 4096',
    '',
    'defaults',
    '  mode tcp',
    '  timeout connect 5s',
    '  timeout client 120s',
    '  timeout server 120s',
    ...(options.proxyProtocol === true ? [`  source ${BENCH_HAPROXY_SOURCE}`, '  default-server send-proxy-v2'] : []),
    '',
    'frontend bench',
    `  bind 127.0.0.1:${listenPort}`,
    '  default_backend sim',
    '',
    'backend sim',
    ...(servers.length > 1 ? ['  balance roundrobin'] : []),
    ...servers.map((hostPort, index) => `  server sim${index + 1} ${hostPort}`),
    '',
  ].join('\n');
}

export async function startHaproxyProcess(
  backendUrls: string | readonly string[],
  options: StartOptions & HaproxyConfigOptions & { haproxyPath?: string } = {},
): Promise<ProxyProcess> {
  const haproxy = options.haproxyPath ?? HAPROXY_PATH;
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-overhead-haproxy-'));
  const configPath = join(dir, 'haproxy.cfg');
  writeFileSync(
    configPath,
    haproxyConfig(
      port,
      (typeof backendUrls === 'string' ? [backendUrls] : backendUrls).map((url) => new URL(url).host),
      { proxyProtocol: options.proxyProtocol },
    ),
  );
  const check = spawnSync(haproxy, ['-c', '-q', '-f', configPath], { encoding: 'utf8' });
  if (check.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `haproxy rejected its config: ${(check.stderr || check.stdout).trim()}\n${readFileSync(configPath, 'utf8')}`,
    );
  }
  const child = spawnPinned(haproxy, ['-f', configPath, '-db'], options.pinToCore);
  const proxy = manage('HAProxy', `http://127.0.0.1:${port}`, child, () =>
    rmSync(dir, { recursive: true, force: true }),
  );
  await waitReady(proxy, () => tcpOpen(port), options.readyTimeoutMs ?? 10_000);
  return proxy;
}
