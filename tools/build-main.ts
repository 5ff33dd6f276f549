// `npm run build`: the command around tools/build.ts, in a file of its own so that importing the builder
// (pack-kvroute.ts, the infra tests) never runs it, in the sources or in a bundle.
import { parseCommandLine } from '../libs/platform/src/command-line/parse-command-line';
import { buildApps } from './build';

parseCommandLine({
  usage: 'npm run build',
  summary: "Bundles every app (router, health poller, vllm-sim, the bench's bare proxy) into dist/<app>.mjs.",
  options: {},
});
const outputs = await buildApps();
for (const [name, file] of Object.entries(outputs)) console.log(`${name}: ${file}`);
