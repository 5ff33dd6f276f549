import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { startLocalSims, stopLocalSims, waitReady } from './local-sims';

describe('startLocalSims', () => {
  it('starts real vllm-sim processes on free ports and stops them', async () => {
    const sims = await startLocalSims(2, ['--profile', 'fast', '--model', 'm']);
    try {
      expect(new Set(sims.map((sim) => sim.url)).size).toBe(2);
      for (const sim of sims) {
        const models = (await (await fetch(`${sim.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
        expect(models.data[0]?.id).toBe('m');
      }
    } finally {
      await stopLocalSims(sims);
    }
    expect(sims.every((sim) => sim.process.exitCode !== null || sim.process.signalCode !== null)).toBe(true);
  });
});

describe('waitReady with the process expected to answer', () => {
  /** An in-process server answering 200 on a port of its own: "another process" to a child. */
  async function foreignServer(): Promise<{ port: number; close: () => Promise<void> }> {
    const server = createServer((_, response) => response.end('ok'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    return { port, close: () => new Promise((resolve) => server.close(() => resolve())) };
  }

  it('does not take another process answering on the port for the one it started', async () => {
    const foreign = await foreignServer();
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 10000)'], { stdio: 'ignore' });
    try {
      await expect(
        waitReady(`http://127.0.0.1:${foreign.port}/health`, { process: child, port: foreign.port }),
      ).rejects.toThrow(/answered by another process/);
    } finally {
      child.kill('SIGKILL');
      await foreign.close();
    }
  });

  it('gives up at once when the process it started has exited (its port taken: address in use)', async () => {
    const foreign = await foreignServer();
    const child = spawn(process.execPath, ['-e', 'process.exit(1)'], { stdio: 'ignore' });
    await new Promise((resolve) => child.once('exit', resolve));
    try {
      await expect(
        waitReady(`http://127.0.0.1:${foreign.port}/health`, { process: child, port: foreign.port }),
      ).rejects.toThrow(/exited \(1\) before it was ready/);
    } finally {
      await foreign.close();
    }
  });
});
