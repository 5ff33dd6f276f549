/**
 * Runs the bare pass-through proxy (bare-proxy.ts) as its own process, so the overhead benchmark
 * can pin it to a core like the router.
 *
 * Usage: tsx bench/src/bare-proxy-main.ts --upstream http://127.0.0.1:8000 [--host 127.0.0.1] [--port 0]
 * Prints one line, `bare proxy listening on URL`, once it accepts connections; exits on SIGTERM/SIGINT.
 */
import { parseArgs } from 'node:util';
import { startBareProxy } from './bare-proxy';

const { values: args } = parseArgs({
  options: {
    upstream: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '0' },
  },
});

async function main(): Promise<void> {
  if (!args.upstream) throw new Error('--upstream URL is required');
  const proxy = await startBareProxy({ upstream: args.upstream, host: args.host, port: Number(args.port) });
  process.stdout.write(`bare proxy listening on ${proxy.url}\n`);
  const stop = (): void => {
    proxy.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((error: unknown) => {
  process.stderr.write(`bare proxy: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
