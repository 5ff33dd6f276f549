#!/usr/bin/env node
// The `kvroute` command of the packed package (tools/pack-kvroute.ts): one entry for every kvroute
// process. Each command is a bundle in ../dist, run in this process as if started on its own
// (`node dist/<bundle>.mjs <flags>`); KVROUTE_BUNDLE_DIR tells the benchmarks to start their sims,
// routers and poller from the same bundles (bench/src/app-process.ts).
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const COMMANDS = {
  router: ['router', 'the KV-cache-aware router (OpenAI-compatible reverse proxy)'],
  poller: ['health-poller', "the health poller: scrapes backends' /metrics and health, publishes state through Redis"],
  sim: ['vllm-sim', 'a simulated vLLM backend (no GPU)'],
  bench: ['bench', 'compare routing policies on a scenario (local sims, or a real deployment)'],
  demo: ['demo', 'the live comparison on this machine, in about a minute'],
  'api-key': ['api-key', "a new tenant API key: its secret, shown once, and the key file's entry"],
};

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const [command, ...rest] = process.argv.slice(2);

if (command === '--version' || command === '-V' || command === 'version') {
  const build = JSON.parse(readFileSync(join(packageDir, 'build.json'), 'utf8'));
  process.stdout.write(
    `kvroute ${build.version} (commit ${build.commit === 'unknown' ? 'unknown' : build.commit.slice(0, 12)})\n`,
  );
  process.exit(0);
}
if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
  const width = Math.max(...Object.keys(COMMANDS).map((name) => name.length));
  const lines = Object.entries(COMMANDS).map(([name, [, what]]) => `  ${name.padEnd(width)}  ${what}`);
  const text =
    `Usage: kvroute <command> [flags]   (kvroute <command> --help for its flags)\n\n${lines.join('\n')}\n\n ` +
    ` --version  the version and commit of this build\n`;
  if (command === undefined) {
    process.stderr.write(text);
    process.exit(2);
  }
  process.stdout.write(text);
  process.exit(0);
}
const entry = COMMANDS[command];
if (entry === undefined) {
  process.stderr.write(
    `kvroute: unknown command '${command}' (one of: ${Object.keys(COMMANDS).join(', ')}; see kvroute --help)\n`,
  );
  process.exit(2);
}
const bundles = join(packageDir, 'dist');
const script = join(bundles, `${entry[0]}.mjs`);
process.env.KVROUTE_BUNDLE_DIR = bundles;
// Usage lines say `kvroute <command>` rather than the checkout's `npm run <script> --` (parse-command-line.ts).
process.env.KVROUTE_LAUNCHED_AS = `kvroute ${command}`;
// The bundle reads its flags from process.argv.slice(2), as when started on its own.
process.argv = [process.argv[0], script, ...rest];
await import(pathToFileURL(script).href);
