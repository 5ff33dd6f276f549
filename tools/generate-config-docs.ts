// Writes docs/configuration.md from the apps' zod config schemas: `npm run docs:config`.
// Each app has a test that fails when its section here is stale.
// Also writes libs/platform/src/config/kvroute-file-keys.ts, the top-level keys of the routers' and pollers'
// shared kvroute.yaml: an app cannot import another app's schema, yet must tell another app's key from a typo.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCommandLine } from '../libs/platform/src/command-line/parse-command-line';

parseCommandLine({
  usage: 'npm run docs:config',
  summary: "Writes docs/configuration.md from the apps' config schemas (every option, its flag, env var and default).",
  options: {},
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { renderConfigMarkdown, renderKvrouteFileKeys } = await import('@kvroute/platform');
const { PollerConfig, renderPollerConfigDoc } = await import('../apps/health-poller/src/config');
const { renderRouterConfigDoc, RouterConfig } = await import('../apps/router/src/config');
const { renderSimConfigDoc } = await import('../apps/vllm-sim/src/config');

const header =
  '# Configuration\n\nGenerated from the config schemas by `npm run docs:config`; do not edit by hand.\n\n' +
  '**Strict.** A config file key no kvroute app knows is refused at start, at any depth, with the nearest known ' +
  'key (`polcy in kvroute.yaml: unknown key "polcy" (did you mean "policy"?)`). In the shared `kvroute.yaml`, a ' +
  "top-level key only the other app knows (the poller's `intervalMs` for a router) is left to it. Each mistake is " +
  'one line naming the flag, env var or file key and what was expected (`--backends: "127.0.0.1:8001" is not a ' +
  'URL; expected http://host:port`), and the process exits with code 2.\n\n' +
  "**Environment.** A variable under an app's prefix that no option reads (`KVROUTE_POLCY`) is logged as a " +
  "warning at start, with the nearest option's variable, and otherwise ignored: it is not refused, because an " +
  "environment is shared (a container's, a shell's) and may hold variables of another version or another app. " +
  "Another app's prefix under the router's (`KVROUTE_POLLER_`, `KVROUTE_SIM_`, `KVROUTE_ORACLE_`) and the " +
  "process's own (`KVROUTE_COMMIT`, `KVROUTE_BUNDLE_DIR`, `KVROUTE_LAUNCHED_AS`) are not warned about.\n\n";
const text =
  header +
  [
    renderRouterConfigDoc(renderConfigMarkdown),
    renderSimConfigDoc(renderConfigMarkdown),
    renderPollerConfigDoc(renderConfigMarkdown),
  ].join('\n');
writeFileSync(join(import.meta.dirname, '..', 'docs', 'configuration.md'), text);
console.log('docs/configuration.md written');
writeFileSync(
  join(import.meta.dirname, '..', 'libs', 'platform', 'src', 'config', 'kvroute-file-keys.ts'),
  renderKvrouteFileKeys({ router: Object.keys(RouterConfig.shape), poller: Object.keys(PollerConfig.shape) }),
);
console.log('libs/platform/src/config/kvroute-file-keys.ts written');
