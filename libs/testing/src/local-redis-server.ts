import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { processWide } from './process-wide';

/** Binary to spawn; override with env `REDIS_SERVER_BIN`. */
export const REDIS_SERVER_BIN = process.env['REDIS_SERVER_BIN'] ?? 'redis-server';

const READY_TIMEOUT_MS = 5_000;
const STOP_GRACE_MS = 5_000;
const OUTPUT_TAIL_CHARS = 4_000;

/** Every redis-server this process spawned and has not seen exit; SIGKILLed if the process exits first. */
const liveChildren = processWide('live-children', () => {
  const children = new Set<ChildProcess>();
  process.on('exit', () => {
    for (const child of children) child.kill('SIGKILL');
  });
  return children;
});

/**
 * Puts a child this process spawned (a helper's tool such as `redis-cli`) under the same exit hook as the servers:
 * SIGKILLed if this process exits first, forgotten once it exits or fails to spawn.
 */
export function killChildOnProcessExit(child: ChildProcess): void {
  if (child.exitCode !== null || child.signalCode !== null) return;
  liveChildren.add(child);
  const forget = (): void => {
    liveChildren.delete(child);
  };
  child.once('exit', forget);
  child.once('error', forget);
}

/** A free TCP port on 127.0.0.1 (bind to 0, read the port, release it). */
export function findFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : undefined;
      server.close(() => (port ? resolve(port) : reject(new Error('could not read a free port'))));
    });
  });
}

/** `count` distinct free TCP ports on 127.0.0.1: all bound at once before any is released, so none is handed out twice. */
export async function findFreePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<net.Server>((resolve, reject) => {
          const server = net.createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((server) => (server.address() as net.AddressInfo).port);
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  return ports;
}

/** One raw RESP `PING`; true if the answer is `+PONG` within `timeoutMs`. Never rejects. */
export function pingRedis(port: number, host = '127.0.0.1', timeoutMs = 250): Promise<boolean> {
  return new Promise((resolve) => {
    let buffered = '';
    let settled = false;
    const socket = net.connect({ port, host });
    const finish = (answer: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      if (buffered.includes('\r\n')) finish(buffered.startsWith('+PONG'));
    });
    socket.on('error', () => finish(false));
    socket.on('close', () => finish(false));
  });
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

export interface LocalRedisServer {
  readonly port: number;
  readonly url: string;
  /** True between a successful start and the process exiting. */
  readonly running: boolean;
  /** SIGTERM, wait for exit (SIGKILL after 5 s). No-op if not running. */
  stop(): Promise<void>;
  /** SIGKILL and wait for exit. No-op if not running. */
  kill(): Promise<void>;
  /** Stop if running, then start again on the same port and wait for PING. */
  restart(): Promise<void>;
}

export interface StartLocalRedisServerOptions {
  /** Default: a free loopback port (retried a few times if taken meanwhile). With a port, one attempt only. */
  port?: number;
  /**
   * Flags appended after the defaults and kept for every restart (e.g. `--cluster-enabled yes`, a `--dir` of the
   * caller's own). Only for flags the defaults do not set: port, bind and persistence stay as above.
   */
  extraArgs?: readonly string[];
}

/**
 * Spawns `redis-server --port P --bind 127.0.0.1 --save '' --appendonly no` (no persistence, loopback only) and
 * resolves once it answers PING. Without `port`, picks a free one and retries a few times if it is taken meanwhile.
 */
export async function startLocalRedisServer(options: StartLocalRedisServerOptions = {}): Promise<LocalRedisServer> {
  let lastError: unknown;
  const attempts = options.port === undefined ? 3 : 1;
  for (let attempt = 0; attempt < attempts; attempt++) {
    const port = options.port ?? (await findFreePort());
    const server = new LocalRedis(port, options.extraArgs ?? []);
    try {
      await server.start();
      return server;
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}

class LocalRedis implements LocalRedisServer {
  readonly url: string;
  private child: ChildProcess | undefined;

  constructor(
    readonly port: number,
    private readonly extraArgs: readonly string[],
  ) {
    this.url = `redis://127.0.0.1:${port}`;
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  async start(): Promise<void> {
    if (this.child) throw new Error(`redis-server on port ${this.port} is already running`);
    const args = [
      '--port',
      String(this.port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      ...this.extraArgs,
    ];
    const child = spawn(REDIS_SERVER_BIN, args, { cwd: tmpdir(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const collect = (chunk: Buffer): void => {
      output = (output + chunk.toString('utf8')).slice(-OUTPUT_TAIL_CHARS);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    // A forgotten server must not keep the test process alive; the exit hook kills it.
    child.unref();
    (child.stdout as unknown as { unref?: () => void } | null)?.unref?.();
    (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();

    let exited = false;
    let spawnError: Error | undefined;
    liveChildren.add(child);
    child.once('error', (error) => {
      spawnError = error;
    });
    child.once('exit', () => {
      exited = true;
      liveChildren.delete(child);
      if (this.child === child) this.child = undefined;
    });
    this.child = child;

    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (spawnError || exited) {
        if (this.child === child) this.child = undefined;
        liveChildren.delete(child);
        const reason = spawnError
          ? `${spawnError.message} (is redis-server installed? set REDIS_SERVER_BIN to its path)`
          : `exited with ${child.exitCode ?? child.signalCode}`;
        throw new Error(`redis-server on port ${this.port} failed to start: ${reason}\n${output.trim()}`);
      }
      if (await pingRedis(this.port)) return;
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        await waitForExit(child);
        throw new Error(
          `redis-server on port ${this.port} did not answer PING within ${READY_TIMEOUT_MS} ms\n${output.trim()}`,
        );
      }
      await delay(10);
    }
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child) return;
    const exit = waitForExit(child);
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
    await exit;
    clearTimeout(timer);
  }

  async kill(): Promise<void> {
    const child = this.child;
    if (!child) return;
    const exit = waitForExit(child);
    child.kill('SIGKILL');
    await exit;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }
}
