// Writes docs/configuration.md from the apps' zod config schemas: `npm run docs:config`.
// Each app has a test that fails when its section here is stale.
// Also writes libs/platform/src/config/kvroute-file-keys.ts, the top-level keys of the routers' and pollers'
// shared kvroute.yaml: an app cannot import another app's schema, yet must tell another app's key from a typo.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderConfigMarkdown, renderKvrouteFileKeys } from '@kvroute/platform';
import { PollerConfig, renderPollerConfigDoc } from '../apps/health-poller/src/config';
import { renderRouterConfigDoc, RouterConfig } from '../apps/router/src/config';
import { renderSimConfigDoc } from '../apps/vllm-sim/src/config';
import { parseCommandLine } from '../libs/platform/src/command-line/parse-command-line';

parseCommandLine({
  usage: 'npm run docs:config',
  summary: "Writes docs/configuration.md from the apps' config schemas (every option, its flag, env var and default).",
  options: {},
});

const header =
  '# Configuration\n\nGenerated from the config schemas by `npm run docs:config`; do not edit by hand.\n\n';
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
