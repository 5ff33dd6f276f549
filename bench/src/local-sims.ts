import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';

/** Starts vllm-sim processes on free loopback ports, for the demo and benchmarks. */
export interface LocalSim {
  readonly url: string;
  readonly process: ChildProcess;
}

const repoRoot = join(import.meta.dirname, '..', '..');

export async function startLocalSims(count: number, simArgs: readonly string[], options: { pinToCore?: number } = {}): Promise<LocalSim[]> {
  const sims: LocalSim[] = [];
  for (let index = 0; index < count; index++) {
    const port = await freePort();
    const args = ['--import', 'tsx', join(repoRoot, 'apps/vllm-sim/src/main.ts'), '--port', String(port), '--log-level', 'warn', ...simArgs];
    const child =
      options.pinToCore === undefined
        ? spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] })
        : spawn('taskset', ['-c', String(options.pinToCore), process.execPath, ...args], { stdio: ['ignore', 'inherit', 'inherit'] });
    sims.push({ url: `http://127.0.0.1:${port}`, process: child });
  }
  await Promise.all(sims.map((sim) => waitHealthy(sim.url)));
  return sims;
}

export async function stopLocalSims(sims: readonly LocalSim[]): Promise<void> {
  await Promise.all(
    sims.map(
      (sim) =>
        new Promise<void>((resolve) => {
          if (sim.process.exitCode !== null) return resolve();
          sim.process.once('exit', () => resolve());
          sim.process.kill('SIGTERM');
        }),
    ),
  );
}

async function waitHealthy(url: string): Promise<void> {
  for (let attempt = 0; attempt < 300; attempt++) {
    try {
      if ((await fetch(`${url}/health`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`vllm-sim at ${url} did not become healthy`);
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}
