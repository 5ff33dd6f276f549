import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { waitFor } from './start-test-cluster';

const REPOSITORY = join(import.meta.dirname, '../../..');

/** The composition roots a test can start as their own processes, as `npm run <app>` does. */
export const MAINS = {
  router: 'apps/router/src/main.ts',
  poller: 'apps/health-poller/src/main.ts',
  sim: 'apps/vllm-sim/src/main.ts',
} as const;

/** A kvroute app's main.ts in a process of its own, its stdout kept line by line. */
export interface MainProcess {
  /** Every complete line written to stdout so far. */
  readonly lines: string[];
  /** What it wrote to stderr (a start-up error). */
  stderr(): string;
  /** Resolves the first line `matches` accepts, waiting up to `timeoutMs`. */
  waitForLine(matches: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  /** SIGTERM, then waits for the exit (what it logs while stopping is in `lines`). */
  stop(): Promise<void>;
}

/**
 * Starts `app`'s main.ts with `args` and no KVROUTE_* variables of the caller's (so the flags are all it
 * is told). Only what a test cannot see in process: what main.ts itself wires (the root logger, formats).
 */
export function startMain(app: keyof typeof MAINS, args: readonly string[]): MainProcess {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', join(REPOSITORY, MAINS[app]), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: REPOSITORY,
    env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '' },
  });
  const lines: string[] = [];
  let partial = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts);
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    lines,
    stderr: () => stderr,
    async waitForLine(matches, timeoutMs = 30_000) {
      // An exited process writes no more: its error is the answer, at once.
      const exitedOrFound = (): boolean => child.exitCode !== null || lines.some(matches);
      await waitFor(exitedOrFound, timeoutMs).catch(() => undefined);
      if (!lines.some(matches)) {
        throw new Error(`${app}: no such line in ${timeoutMs} ms; stdout:\n${lines.join('\n')}\nstderr:\n${stderr}`);
      }
      return lines.find(matches) as string;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
